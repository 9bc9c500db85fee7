"""Engine clients: one pooled async HTTP client per gateway, the SSE codec, capabilities."""
