"""The answer cache (docs/cache.md): exact and semantic hits, guarded, shared across
replicas, replayed as a stream."""
