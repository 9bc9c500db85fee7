"""Shared policy state behind one protocol (``protocol.py``): token buckets with atomic
check-and-reserve, quota counters and concurrency leases with TTLs. ``memory.py`` keeps it
in-process; a Redis implementation (one Lua script per read-modify-write) passes the same
contract suite (``tests/contract/test_state_store.py``)."""
