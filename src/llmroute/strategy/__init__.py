"""Strategies: how the layers combine for a class of requests."""
