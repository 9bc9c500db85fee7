"""Observability: per-request traces, metrics, the per-request log line, the decision audit
and fuse events."""
