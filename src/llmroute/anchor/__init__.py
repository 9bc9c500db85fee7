"""Resource anchor (layer 2): which backend can serve this request best right now."""
