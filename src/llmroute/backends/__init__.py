"""Engine clients: one pooled async HTTP client per gateway, the SSE codec, the engine-kind
table (capabilities + metrics source)."""
