"""Engine discovery: sources of endpoints (``host``, ``port``) for the backends declared
in ``discovery:`` (``config/discovery.py``). ``protocol.py`` holds the contract,
``dns.py`` and ``kubernetes.py`` the sources, ``sources.py`` picks one for an entry; the
refresh loop that turns endpoints into backends is ``assemble/discovery.py``."""
