"""One exception tree for llmroute, and its mapping onto OpenAI-shaped error bodies.

::

    LLMRouteError                      base; .status (HTTP), .type, .code, .param
    ├── RequestError                   the client's fault (4xx), never retried
    │   ├── InvalidRequest             400 invalid_request_error (bad JSON, bad field, n > 1 …)
    │   ├── ContextLengthExceeded      400 context_length_exceeded (no backend's context fits)
    │   ├── ContentFiltered            400 content_filter (a word list with action block)
    │   ├── ModelNotFound              404 model_not_found
    │   ├── NotFound                   404 not_found (an unknown trace id)
    │   ├── PayloadTooLarge            413 request body over the configured limit
    │   └── UnsupportedMediaType       415 Content-Type is not application/json
    ├── BackendError                   an engine failed; .backend_id, .retryable
    │   ├── UpstreamConnectError       could not connect / connection reset (retryable)
    │   ├── UpstreamTimeout            connect, TTFT, inter-token stall or total timeout (retryable)
    │   ├── UpstreamStatusError        the engine answered 4xx/5xx; retryable for 5xx, 429, 401/403/404/405
    │   └── UpstreamProtocolError      malformed SSE/JSON (retryable)
    │       └── UpstreamInBandError    an in-band ``error`` event in the stream
    ├── PolicyError                    a gateway policy refused the caller (never retried)
    │   ├── AuthenticationFailed       401 invalid_api_key (missing, unknown, revoked, expired)
    │   ├── PermissionDenied           403 the key may not use this model / pool / surface
    │   └── RateLimited                429 rate_limit_exceeded / insufficient_quota; .retry_after_s
    ├── NoBackendAvailable             503: every candidate failed or none is usable (every
    │   │                              attempt timed out: UpstreamTimeout, 504; every attempt
    │   │                              rate-limited: RateLimited, 429 with Retry-After)
    │   └── Overloaded                 503 every engine saturated: shed by priority class
    ├── StateUnavailable               503: the state store did not answer in time
    ├── ShuttingDown                   503 server_shutting_down: draining after SIGTERM
    ├── ConfigError                    bad configuration; message names file:line:field
    ├── EngineError                    a local engine could not be built, started or stopped
    ├── GateModelError                 the gate's encoder could not be exported or loaded
    ├── SignalSourceError              a metrics endpoint (engine /metrics, DCGM) could not be read
    └── DiscoveryError                 an endpoint source (DNS, Kubernetes API) could not be read

`to_openai(err)` gives ``(status, {"error": {"message", "type", "param", "code"}})``.
"""

from __future__ import annotations

from typing import Any


class LLMRouteError(Exception):
    """Base of every llmroute error.

    Attributes: ``status`` (HTTP status code), ``type`` and ``code`` (OpenAI error fields),
    ``param`` (the offending request field, dotted, or None).
    """

    status = 500
    type = "server_error"
    code: str | None = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class RequestError(LLMRouteError):
    """The request is wrong; the client must change it. Never retried."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class InvalidRequest(RequestError):
    """400: malformed JSON, a missing or ill-typed field, or an unsupported value."""


class ContextLengthExceeded(RequestError):
    """400: prompt tokens + max tokens exceed every eligible backend's context window."""

    code = "context_length_exceeded"


class ContentFiltered(RequestError):
    """400: the request's text holds an entry of a ``block`` word list (``content_filter``
    in the configuration)."""

    code = "content_filter"


class ModelNotFound(RequestError):
    """404: ``model`` is neither a pool, ``auto``, nor a served model name."""

    status = 404
    code = "model_not_found"


class NotFound(RequestError):
    """404: an id the router does not know (``GET /trace/{request_id}``)."""

    status = 404
    type = "not_found_error"
    code = "not_found"


class PayloadTooLarge(RequestError):
    """413: the body is larger than ``server.max_body_bytes``."""

    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(RequestError):
    """415: the Content-Type is missing or not ``application/json``."""

    status = 415
    code = "unsupported_media_type"


class BackendError(LLMRouteError):
    """An engine failed to serve. ``retryable`` says whether another attempt may succeed.

    ``message`` may reach the client, so it describes the failure ("the engine answered
    503: …", "the connection closed in the middle of the answer") and names no backend,
    host or port; ``backend_id`` and ``detail`` (None or text) are what only logs and traces
    see: which backend, the low-level error with the engine's host and port, or the raw
    bytes of a malformed answer."""

    status = 502
    type = "upstream_error"
    code = "upstream_error"
    retryable = True

    def __init__(self, message: str, *, backend_id: str = "", detail: str | None = None,
                 **kw: Any):
        super().__init__(message, **kw)
        self.backend_id = backend_id
        self.detail = detail


class UpstreamConnectError(BackendError):
    """The engine could not be reached, or the connection broke."""

    code = "upstream_connect_error"


class UpstreamTimeout(BackendError):
    """A timeout expired; ``phase`` is ``connect``, ``ttft``, ``stall``, ``total``, or
    ``slow`` (a stream too slow to finish in time: ``fuse/pace.py``)."""

    status = 504
    code = "upstream_timeout"

    def __init__(self, message: str, *, phase: str, **kw: Any):
        super().__init__(message, **kw)
        self.phase = phase


class UpstreamStatusError(BackendError):
    """The engine answered with an HTTP error.

    ``upstream_status`` is the engine's status, ``body`` its parsed JSON error (or None),
    ``retry_after_s`` its Retry-After header in seconds (or None). Retryable for 5xx, 429 and
    the statuses that mean a misconfigured backend (401, 403, 404, 405); other 4xx (400, 413,
    422, …) are the client's fault and are returned to it with the engine's status.
    """

    code = "upstream_status_error"

    def __init__(self, message: str, *, upstream_status: int, body: Any = None,
                 retry_after_s: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.upstream_status = upstream_status
        self.body = body
        self.retry_after_s = retry_after_s
        self.retryable = upstream_status >= 500 or upstream_status in _BACKEND_FAULT
        if not self.retryable:
            self.status = upstream_status
            self.type = "invalid_request_error"


_BACKEND_FAULT = frozenset({401, 403, 404, 405, 429})
"""Engine statuses that are the backend's fault, not the client's: bad credentials or a
wrong base URL / served model name in our config (401, 403, 404, 405), or overload (429)."""


class UpstreamProtocolError(BackendError):
    """The engine sent something that is not valid SSE/JSON, or an in-band error event."""

    code = "upstream_protocol_error"


class UpstreamInBandError(UpstreamProtocolError):
    """The engine's stream carried an ``error`` event instead of a chunk."""


class PolicyError(LLMRouteError):
    """A gateway policy (keys, limits, quotas) refused the request. Never retried; messages
    name a key only by its id/prefix, never its secret."""

    status = 403
    type = "invalid_request_error"
    code = "policy_error"


class AuthenticationFailed(PolicyError):
    """401: no API key, or one that is malformed, unknown, revoked or expired."""

    status = 401
    code = "invalid_api_key"


class PermissionDenied(PolicyError):
    """403: the key may not use the requested model or pool, or this operator surface."""

    code = "permission_denied"


class RateLimited(PolicyError):
    """429: a rate limit (``code`` ``rate_limit_exceeded``, ``type`` ``requests`` or
    ``tokens``) or a token quota (``insufficient_quota``) is spent. ``retry_after_s``:
    seconds until a retry would be admitted (None: never, e.g. a request larger than the
    limit); ``headers``: the ``x-ratelimit-*`` headers of the refusal."""

    status = 429
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after_s: float | None = None,
                 kind: str = "requests", headers: dict[str, str] | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after_s = retry_after_s
        self.type = "insufficient_quota" if self.code == "insufficient_quota" else kind
        self.headers = headers or {}


class StateUnavailable(LLMRouteError):
    """503: the state store (rate-limit buckets, quotas, leases) did not answer within its
    time bound; the request is refused rather than admitted unmetered."""

    status = 503
    type = "service_unavailable"
    code = "state_unavailable"


class NoBackendAvailable(LLMRouteError):
    """503: no candidate could serve; ``retry_after_s`` suggests when to try again."""

    status = 503
    type = "service_unavailable"
    code = "no_backend_available"

    def __init__(self, message: str, *, retry_after_s: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after_s = retry_after_s


class Overloaded(NoBackendAvailable):
    """503: every candidate engine is saturated and the admission queue would not serve
    the request in time (``code``: ``queue_full`` — shed for a higher class or the queue is
    full; ``deadline_unmeetable`` — its class's TTFT target cannot be met; ``queue_timeout``
    — it waited the longest allowed); ``retry_after_s`` suggests when to try again."""

    code = "overloaded"


class ShuttingDown(LLMRouteError):
    """503: the server is draining before it stops (``api/drain.py``) and takes no new
    request; ``retry_after_s`` suggests when to retry (through the load balancer, which
    sends it elsewhere)."""

    status = 503
    type = "service_unavailable"
    code = "server_shutting_down"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after_s = retry_after_s


class ConfigError(LLMRouteError):
    """The configuration is invalid; the message names ``file:line: field: problem``."""

    code = "config_error"


class EngineError(LLMRouteError):
    """A local engine could not be built, started, health-checked or stopped."""

    code = "engine_error"


class GateModelError(LLMRouteError):
    """The gate's encoder could not be exported, loaded or run. The gate catches it and
    answers from its first stage; it never reaches request handling."""

    code = "gate_model_error"


class SignalSourceError(LLMRouteError):
    """A metrics endpoint could not be read this poll (connect error, timeout, HTTP error).
    Only the signal collector sees it; it never reaches request handling."""

    code = "signal_source_error"


class DiscoveryError(LLMRouteError):
    """An endpoint source (DNS name, Kubernetes EndpointSlice API) could not be read this
    refresh; ``reason`` is a short label for the metric (``resolve``, ``forbidden``, …).
    Only the discovery loop sees it: the last known endpoints keep serving."""

    code = "discovery_error"

    def __init__(self, message: str, *, reason: str = "error"):
        super().__init__(message)
        self.reason = reason


def to_openai(err: LLMRouteError) -> tuple[int, dict[str, Any]]:
    """Map an llmroute error to ``(http_status, {"error": {message, type, param, code}})``.

    An engine's own 4xx keeps the engine's message, type and param, normalised to this
    shape (engines differ: llama.cpp sends a numeric ``code`` and no ``param``).
    """
    fields = {"message": err.message, "type": err.type, "param": err.param, "code": err.code}
    if isinstance(err, UpstreamStatusError) and not err.retryable:
        fields.update(_engine_fields(err.body))
    return err.status, {"error": fields}


def error_object(body: Any) -> dict[str, Any] | None:
    """The error inside an engine's error body: OpenAI's ``{"error": {...}}``, or vLLM's
    top-level ``{"object": "error", "message", "type", "code"}`` itself; None otherwise."""
    if not isinstance(body, dict):
        return None
    inner = body.get("error")
    if isinstance(inner, dict):
        return inner
    return body if body.get("object") == "error" else None


def _engine_fields(body: Any) -> dict[str, Any]:
    inner = error_object(body)
    if inner is None:
        return {}
    out = {k: inner[k] for k in ("message", "type", "param", "code")
           if isinstance(inner.get(k), str)}
    return out
