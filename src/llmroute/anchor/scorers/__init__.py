"""Scorers: each maps candidates to [0, 1], higher is better."""
