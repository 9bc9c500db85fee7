"""Shared policy state behind one protocol (``protocol.py``): token buckets with atomic
check-and-reserve, quota counters and concurrency leases with TTLs. ``memory.py`` keeps it
in-process (one replica); ``redis.py`` keeps it in Redis for a fleet of replicas (one Lua
script per read-modify-write, ``lua.py``), and ``guard.py`` decides what the limits do while
Redis cannot answer (fail open by default, or closed). Both stores pass the same contract
suite (``tests/contract/test_state_store.py``)."""
