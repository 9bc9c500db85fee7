"""Gateway policies that run before the gate (keys, limits, filters, context length)."""
