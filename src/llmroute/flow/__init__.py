"""The request flow (DESIGN.md §2): ``pipeline.py`` runs the steps in order; ``routed.py``
holds its results (``Decision``, ``Routed``), ``legs.py`` the legs of a strategy that serves
a request itself, ``embeddings.py`` the ``/v1/embeddings`` path."""
