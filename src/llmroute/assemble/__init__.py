"""The composition root: Config → Runtime → served app.

``runtime.py`` builds every part (backends, HTTP client, gate, strategy, anchor profile,
breaker, stats, dispatch's ``Deps``) and owns their lifetime (``open_runtime``: local
engines, the signal collector); ``anchor.py`` builds the anchor's profile, shared plugin
objects and signal collector; ``gate.py`` the configured gate; ``serve.py`` serves the app
over it. Nothing on the request
path (``flow/``, ``dispatch/``, ``api/``) imports this package.
"""
