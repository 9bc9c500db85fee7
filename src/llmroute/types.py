"""Immutable value objects passed between the layers (see DESIGN.md §2).

Units: times in seconds unless a name ends in ``_ms``; token counts in tokens; fractions 0–1.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

Endpoint = Literal["chat", "completions"]


@dataclass(frozen=True, slots=True)
class Backend:
    """One engine endpoint.

    ``engine`` is the engine kind (``vllm``, ``sglang``, ``llamacpp``, ``ollama``, ``openai``,
    ``emulator``); ``base_url`` ends before ``/v1``; ``model`` is the served model name sent
    upstream; ``context_length`` is the per-request context window in tokens.
    """

    id: str
    pool: str
    engine: str
    base_url: str
    model: str
    context_length: int
    api_key: str | None = None


@dataclass(frozen=True, slots=True)
class Pool:
    """A named group of interchangeable backends serving one logical model."""

    name: str
    backend_ids: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A validated client request.

    ``body`` is the client's JSON object as received (unknown fields kept, passed through);
    ``text`` is the concatenated prompt text the gate reads; ``prompt_tokens`` an estimate;
    ``max_tokens`` the requested output budget (None: engine default).
    """

    endpoint: Endpoint
    body: dict[str, Any]
    model: str
    stream: bool
    text: str
    prompt_tokens: int
    max_tokens: int | None
    request_id: str
    has_tools: bool = False
    turns: int = 1


@dataclass(frozen=True, slots=True)
class Intent:
    """The gate's verdict: ``label`` with ``confidence`` (0–1), ``runners_up`` as
    ``((label, score), …)``, ``conflict`` (0–1, how close the top two are),
    ``complexity`` (0.1–5.0) and the ``source`` that produced it."""

    label: str
    confidence: float
    runners_up: tuple[tuple[str, float], ...] = ()
    conflict: float = 0.0
    complexity: float = 1.0
    source: str = "rules"


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """The strategy's decision: the ``pool`` to serve from and why; ``backend_ids`` are the
    primary candidates, ``fallback_ids`` the backends tried after them; ``max_attempts`` is
    the request's whole retry budget (attempts across all backends, ≥ 1)."""

    pool: str
    reason: str
    backend_ids: tuple[str, ...] = ()
    fallback_ids: tuple[str, ...] = ()
    max_attempts: int = 3


@dataclass(frozen=True, slots=True)
class BackendStats:
    """The router's own view of one backend at one instant.

    ``in_flight`` requests; ``latency_ms``/``ttft_ms`` are EWMAs (None before the first sample);
    ``error_rate`` an EWMA of failures (0–1); ``taken_at`` the clock reading in seconds.
    """

    backend_id: str
    in_flight: int = 0
    latency_ms: float | None = None
    ttft_ms: float | None = None
    error_rate: float = 0.0
    taken_at: float = 0.0


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Every signal known for the candidate set at one instant: ``stats`` per backend id."""

    stats: dict[str, BackendStats] = field(default_factory=dict)
    taken_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A backend in the anchor's order, with its total ``score`` and per-scorer ``scores``."""

    backend: Backend
    score: float
    scores: dict[str, float] = field(default_factory=dict)


class Outcome(enum.Enum):
    """How one attempt on a backend ended, as the breaker sees it."""

    SUCCESS = "success"
    FAILURE = "failure"


class BreakerState(enum.Enum):
    """Circuit-breaker states."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"
