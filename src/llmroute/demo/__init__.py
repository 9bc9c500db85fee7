"""``llmroute demo``: start the router and its engines, send real prompts over HTTP, and show
how each was routed."""
