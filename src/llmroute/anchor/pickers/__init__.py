"""Pickers: order scored backends; first = chosen, rest = fallback order."""
