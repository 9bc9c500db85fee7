"""Observability: logging, metrics, traces."""
