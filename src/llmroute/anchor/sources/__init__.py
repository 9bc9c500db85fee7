"""Signal sources: one module per engine kind, plus the router's own view."""
