"""Candidate filters: each drops backends that must not serve this request."""
