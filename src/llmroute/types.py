"""Immutable value objects passed between the layers (see DESIGN.md §2).

Units: times in seconds unless a name ends in ``_ms``; token counts in tokens; fractions 0–1.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

Endpoint = Literal["chat", "completions", "embeddings"]


_NONE: Mapping[str, Any] = MappingProxyType({})
"""An empty read-only map (a NamedTuple field's default is shared by every instance)."""


class Price(NamedTuple):
    """A pool's price: ``input_per_mtok`` per million prompt tokens and ``output_per_mtok``
    per million completion tokens, in the operator's currency unit (``config/price.py``)."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """What ``prompt_tokens`` in and ``completion_tokens`` out cost at this price, in
        its currency unit: ``(prompt · input + completion · output) / 10⁶``."""
        return (prompt_tokens * self.input_per_mtok
                + completion_tokens * self.output_per_mtok) / 1e6

    @property
    def blended(self) -> float:
        """The price of a million tokens at a 1:1 input:output mix, ``(input + output) / 2``
        (as RouteLLM's benchmarks README blends list prices into one per-token price)."""
        return (self.input_per_mtok + self.output_per_mtok) / 2


@dataclass(frozen=True, slots=True)
class Backend:
    """One engine endpoint.

    ``engine`` is the engine kind (``vllm``, ``sglang``, ``llamacpp``, ``ollama``, ``openai``,
    ``emulator``); ``base_url`` ends before ``/v1``; ``model`` is the served model name sent
    upstream; ``context_length`` is the per-request context window in tokens;
    ``capabilities`` (``tools``, ``logprobs``, ``continuation``) as configured, or None for
    the engine kind's defaults (``backends/engines.py``); ``mode``: ``chat`` (chat and
    legacy completions) or ``embeddings`` (``POST /v1/embeddings`` only); ``ttft_s`` and
    ``stall_s`` (seconds) override the configured ``timeouts`` for this backend (None: the
    global ones); ``shape`` turns a client body into the body sent upstream (its engine's
    quirks and served ``model``, built once with the backend: ``backends/quirks.py``), None:
    the client's body with ``model`` replaced; ``price`` is its pool's (None: not priced).
    """

    id: str
    pool: str
    engine: str
    base_url: str
    model: str
    context_length: int
    api_key: str | None = None
    capabilities: frozenset[str] | None = None
    mode: str = "chat"
    ttft_s: float | None = None
    stall_s: float | None = None
    shape: Callable[[dict[str, Any]], dict[str, Any]] | None = field(
        default=None, compare=False, repr=False)
    price: Price | None = None


@dataclass(frozen=True, slots=True)
class Pool:
    """A named group of interchangeable backends serving one logical model."""

    name: str
    backend_ids: tuple[str, ...]
    description: str = ""


class ChatRequest(NamedTuple):
    """A validated client request (a NamedTuple: one or more are made per request;
    ``request._replace(...)`` makes a changed copy).

    ``body`` is the client's JSON object as received (unknown fields kept, passed through);
    ``text`` is the concatenated prompt text the gate reads; ``prompt_tokens`` an estimate,
    or a backend tokenizer's count when ``prompt_counted`` (``policy/counting.py``);
    ``max_tokens`` the requested output budget (None: engine default); ``images`` the image
    (non-text) content parts, which the estimate does not count (the count-tokens step does);
    ``finish_by`` when a streamed answer should be whole (monotonic clock s, from its
    priority class's ``e2e_target_s``; None: no deadline).
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
    prompt_counted: bool = False
    images: int = 0
    finish_by: float | None = None


class Win(NamedTuple):
    """The win head's answer for one cheaper pool of its ladder (``gate/win.py``):
    ``probability`` (0–1) that ``pool`` answers the request at least as well as the
    ladder's last (reference) pool, and its ``rank`` (0–1): the share of the head's fit
    prompts given a lower probability (a strategy's ``strong_share`` reads it)."""

    pool: str
    probability: float
    rank: float


@dataclass(frozen=True, slots=True)
class Intent:
    """The gate's verdict: ``label`` with ``confidence`` (0–1), ``runners_up`` as
    ``((label, score), …)``, ``conflict`` (0–1, how close the top two are),
    ``complexity`` (0.1–5.0) and the ``source`` that produced it. ``entropy`` is the
    distribution's Shannon entropy in bits; ``composite`` holds the top two labels when they
    are close enough to call the request both, or the two tasks its instruction asks in
    sequence ("translate it, then summarize it": ``gate/clauses.py``); empty otherwise.
    ``embedding`` is the gate encoder's vector of the latest turn (``(d,)`` float32, unit
    length, ``d`` the encoder's) when the gate embedded it, else None: the answer cache
    reads it instead of embedding the prompt again. ``wins``: the win head's ``Win`` per
    cheaper pool of its ladder, cheapest first (empty without a fitted head)."""

    label: str
    confidence: float
    runners_up: tuple[tuple[str, float], ...] = ()
    conflict: float = 0.0
    complexity: float = 1.0
    source: str = "rules"
    entropy: float = 0.0
    composite: tuple[str, ...] = ()
    embedding: Any = field(default=None, compare=False, repr=False)
    wins: tuple[Win, ...] = ()

    @property
    def is_composite(self) -> bool:
        """True when the request carries two intents (``composite`` is non-empty)."""
        return bool(self.composite)


class RoutePlan(NamedTuple):
    """The strategy's decision: the ``pool`` to serve from and why; ``backend_ids`` are the
    primary candidates, ``fallback_ids`` the backends tried after them; ``max_attempts`` is
    the request's whole retry budget (attempts across all backends, ≥ 1). A NamedTuple
    (one per request)."""

    pool: str
    reason: str
    backend_ids: tuple[str, ...] = ()
    fallback_ids: tuple[str, ...] = ()
    max_attempts: int = 3


class Routed(NamedTuple):
    """A request's answer: the response ``headers`` plus a JSON ``body`` or an SSE byte
    ``stream`` (a NamedTuple, as the other values made per request: half a frozen
    dataclass's cost)."""

    headers: dict[str, str]
    body: dict[str, Any] | None = None
    stream: AsyncIterator[bytes] | None = None


@dataclass(frozen=True, slots=True)
class BackendStats:
    """The router's own view of one backend at one instant.

    ``in_flight`` requests; ``latency_ms``/``ttft_ms`` are EWMAs (None before the first sample);
    ``error_rate`` an EWMA of failures (0–1); ``taken_at`` the clock reading in seconds.
    Over the sliding window (``anchor/stats/router.py``): ``ttft_p95_ms``/``latency_p95_ms``
    (p95, ms), ``ttft_baseline_ms``/``latency_baseline_ms`` (the lowest windowed p50 seen so
    far: the backend's unloaded latency, ms), ``window_error_rate`` (failed fraction 0–1),
    ``output_tps`` (output tokens per second of generation time) and ``window_requests``;
    None while the window holds no sample. ``prefill_tokens``: prompt tokens of the requests
    sent to the backend that have no first token yet; ``prefill_ms_per_token`` and
    ``prefill_overhead_ms``: the learned TTFT model ``TTFT ≈ overhead + tokens ahead ×
    ms/token`` (``anchor/stats/prefill.py``; None until fitted).
    """

    backend_id: str
    in_flight: int = 0
    latency_ms: float | None = None
    ttft_ms: float | None = None
    error_rate: float = 0.0
    taken_at: float = 0.0
    ttft_p95_ms: float | None = None
    latency_p95_ms: float | None = None
    ttft_baseline_ms: float | None = None
    latency_baseline_ms: float | None = None
    window_error_rate: float | None = None
    output_tps: float | None = None
    window_requests: int = 0
    prefill_tokens: int = 0
    prefill_ms_per_token: float | None = None
    prefill_overhead_ms: float | None = None




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


@dataclass(frozen=True, slots=True)
class BreakerView:
    """One backend's circuit breaker as readers outside the fuse see it (the breaker
    replaces it on every change: ``fuse/breaker.py``): open since ``opened_at`` (clock
    seconds; None: not opened since it last closed) for ``cooldown_s`` seconds, then
    half-open; held open until ``held_until`` (an upstream ``Retry-After``; -inf: not held);
    ``probe_free``: a half-open probe slot is free. Pure: ``state``/``allows`` compare with
    the caller's ``now`` (the cool-down as ``now - opened_at ≥ cooldown_s``, the breaker's
    own arithmetic, so every reader agrees with it). ``BreakerView()`` is a closed
    breaker."""

    opened_at: float | None = None
    cooldown_s: float = 0.0
    held_until: float = float("-inf")
    probe_free: bool = True

    def state(self, now: float) -> BreakerState:
        """The state at ``now`` (s): open while held or cooling down, then half-open."""
        if now < self.held_until:
            return BreakerState.OPEN
        if self.opened_at is None:
            return BreakerState.CLOSED
        if now - self.opened_at >= self.cooldown_s:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def allows(self, now: float) -> bool:
        """True when a request may be sent at ``now``: closed, or half-open with a probe slot
        free."""
        state = self.state(now)
        if state is BreakerState.HALF_OPEN:
            return self.probe_free
        return state is BreakerState.CLOSED


class QualityState(enum.Enum):
    """Where a backend stands in quality ejection (``fuse/ejection.py``), as the gauge
    ``llmroute_backend_quality_state`` codes it: ``healthy`` 0, ``probing`` 1 (half-open:
    a small share of traffic tests it), ``cut`` 2 (its share of traffic cut at once),
    ``ejected`` 3 (out of rotation for a cool-off)."""

    HEALTHY = "healthy"
    PROBING = "probing"
    CUT = "cut"
    EJECTED = "ejected"


@dataclass(frozen=True, slots=True)
class QualityView:
    """One demoted backend as the anchor sees it (a backend absent from the views is
    healthy): its ``state``, the ``share`` (fraction 0–1) of the requests it may still be
    offered (0 when ejected), and since when (``since``, clock seconds)."""

    state: QualityState
    share: float
    since: float


class Answer(NamedTuple):
    """One answer a backend gave, as quality ejection judges it (``observe/quality.py``
    reads them off finished traces): ``backend_id``, the clock time ``at`` (s), ``bad`` —
    None for a good answer, else why it was bad (``handoff``: the fuse handed it off, the
    melt; ``empty``; ``truncated``: cut at ``length`` before the requested ``max_tokens``;
    ``verify``: a verifier failed the draft) — and ``entropy``, the mean token entropy of
    the answer in nats (None without logprobs). A NamedTuple: one per answer."""

    backend_id: str
    at: float
    bad: str | None = None
    entropy: float | None = None


BreakerViews = Callable[[], Mapping[str, BreakerView]]
"""``() -> {backend_id: BreakerView}``, read-only; a backend absent from it is closed (the
circuit breaker's ``views``)."""


@dataclass(frozen=True, slots=True)
class EngineSignals:
    """Immutable load snapshot of one engine, as parsed from one poll (or two merged polls;
    ``anchor/sources/signals.py`` builds and merges them).

    Every signal is optional: ``None`` means the engine did not expose it, exposed a value
    that cannot be trusted (NaN, ±Inf, negative, a fraction outside [0, 1], a malformed
    histogram), or the whole response could not be parsed. ``missing`` names every signal
    the source expected and does not have. Units are in the field names (``*_ms``
    milliseconds, ``*_bytes`` bytes, ``*_tps`` tokens per second); ``taken_at`` is the
    caller's clock reading in seconds; ``source`` names the parser.

    - ``running``: requests being decoded now; ``waiting``: requests queued.
    - ``kv_cache_usage``: fraction 0–1 of the KV cache in use; ``kv_capacity_tokens``: the
      cache's size in tokens (per engine).
    - ``ttft_p50_ms``/``ttft_p95_ms``/``tpot_p50_ms``: quantiles of time to first token and
      time per output token, estimated from cumulative histograms (``prom.quantile``).
    - ``prompt_tokens_total``/``generation_tokens_total``: counters since engine start.
    - ``prefix_cache_queries_total``/``prefix_cache_hits_total``: prompt tokens the engine
      looked up in its prefix cache and, of those, tokens it found cached (vLLM V1's
      counters, since engine start).
    - ``gen_throughput_tps``: generation throughput as the engine reports it (SGLang).
    - ``idle_slots``/``total_slots``: llama.cpp server slots.
    - ``gpu_mem_used_bytes``/``gpu_mem_free_bytes``/``gpu_util`` (fraction 0–1): DCGM.
    - ``gpu_temp_c``: the hottest GPU's temperature, °C; ``gpu_mem_bw_util``: the share of
      time (fraction 0–1) the GPU memory interface was busy (DCGM ``DRAM_ACTIVE``, NVML's
      memory utilisation): a memory-bandwidth-bound engine runs near 1.
    - ``net_rtt_ms``: the time from sending the poll to its response headers (ms) and
      ``net_bytes_per_s``: the poll body's bytes over its transfer time, both measured by
      the router on its own connection (``anchor/sources/http.py``; smoothed by the store).
    - ``loaded_models``: Ollama ``(name, size_vram_bytes)`` pairs.

    ``rejected`` names the signals whose reading was present but nonsense (NaN, negative,
    outside its physical range: a unit change such as a percentage where a fraction was
    expected, or a temperature in kelvin): they are None as well, and the collector counts
    them (``llmroute_backend_signal_rejected_total``); a rejected reading never counts
    against a backend.
    """

    taken_at: float
    source: str
    running: int | None = None
    waiting: int | None = None
    kv_cache_usage: float | None = None
    kv_capacity_tokens: int | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p50_ms: float | None = None
    prompt_tokens_total: int | None = None
    generation_tokens_total: int | None = None
    prefix_cache_queries_total: int | None = None
    prefix_cache_hits_total: int | None = None
    gen_throughput_tps: float | None = None
    idle_slots: int | None = None
    total_slots: int | None = None
    gpu_mem_used_bytes: int | None = None
    gpu_mem_free_bytes: int | None = None
    gpu_util: float | None = None
    gpu_temp_c: float | None = None
    gpu_mem_bw_util: float | None = None
    net_rtt_ms: float | None = None
    net_bytes_per_s: float | None = None
    loaded_models: tuple[tuple[str, int], ...] | None = None
    missing: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()


class MetricsSnapshot(NamedTuple):
    """Every signal known for the candidate set at one instant: ``stats`` per backend id
    (the router's own view), ``engines`` per backend id (the fresh engine/GPU signals; a
    backend without fresh signals is absent), ``breakers`` per backend id (the circuit
    breaker's view; a backend absent from it is closed) and ``dark``: the polled backends
    the collector has lost sight of (last poll failed, or signals older than
    ``stale_after_s``; ``anchor/store.py``), which the profile ranks after every other
    backend. A backend that is not polled (no metrics) or not polled yet is never dark.
    ``hot``: the backends whose GPU is too hot for new requests (the store's thermal latch,
    ``anchor/readings.py``); ``quality``: the demoted backends' ``QualityView`` (quality
    ejection; absent: healthy). A NamedTuple (one is made per request); its maps are read,
    never changed."""

    stats: Mapping[str, BackendStats] = _NONE
    taken_at: float = 0.0
    engines: Mapping[str, EngineSignals] = _NONE
    breakers: Mapping[str, BreakerView] = _NONE
    dark: frozenset[str] = frozenset()
    hot: frozenset[str] = frozenset()
    quality: Mapping[str, QualityView] = _NONE


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """What the fuse sees of one upstream chunk: ``entropies`` (nats, one per new token it
    carries; empty when the engine gives no logprobs), or a ``failure`` reason (``cut``,
    ``malformed``, ``inband``, ``stall``, ``timeout``, ``status``) when the upstream broke."""

    entropies: tuple[float, ...] = ()
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class FuseVerdict:
    """The fuse's answer to one event: ``handoff`` True means stop this backend and let the
    next candidate continue; ``reason`` says why (``entropy`` or a failure reason) and
    ``window`` holds the recent per-token entropies in nats (the evidence)."""

    handoff: bool = False
    reason: str | None = None
    window: tuple[float, ...] = ()
