"""The request flow (DESIGN.md §2): ``pipeline.py`` runs the steps over a ``call.Call``;
``stages.py`` the answer stages, ``strategies.py`` the strategy runner, ``rank.py`` plan →
candidates, ``headers.py`` the response headers, ``legs.py`` a strategy's legs,
``embeddings.py`` the ``/v1/embeddings`` flow, ``cache.py`` the answer cache's stage."""
