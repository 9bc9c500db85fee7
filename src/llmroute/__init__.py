"""llmroute: an OpenAI-compatible routing gateway (semantic gate → resource anchor → result fuse)."""

__version__ = "0.1.0"
