"""HTTP API: the OpenAI-compatible app, its wire models and error mapping."""
