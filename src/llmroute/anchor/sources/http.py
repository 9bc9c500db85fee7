"""Polling sources over HTTP: fetch an engine's metrics endpoint(s) and parse them with the
pure parsers next door. Which endpoint and format an engine kind has is the engine-kind
table's (``backends/engines.py``); ``FORMATS`` maps each format name to its source here
(``source_for``). DCGM for remote GPUs.

Contract (``anchor/protocol.py``, ``MetricsSource``): ``await source.poll(backend, now)``
returns one ``EngineSignals`` taken at ``now`` (the caller's clock, seconds). An endpoint
that cannot be read (connect error, timeout, an HTTP error status on the main endpoint)
raises ``SignalSourceError`` so the collector can back off; a body that does not parse is
not an error, it is a snapshot with the signals missing. llama.cpp's ``/slots`` is optional
(it 404s without ``--slots``): its failure only leaves the slot signals missing.

The network: each engine poll is timed on the router's own connection (no extra probe):
``net_rtt_ms`` is the time from sending the request to its response headers (a round trip
plus the engine's time to start answering, which for a metrics page is small), and
``net_bytes_per_s`` the body's bytes over the time from its headers to its last byte, when
that time is at least ``MIN_TRANSFER_S`` (a body that arrives faster is too small to say
anything about the link; ``None`` then). The store keeps their median (``readings.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

import aiohttp

from llmroute.anchor.sources.dcgm import parse_dcgm
from llmroute.anchor.sources.llamacpp import (
    SLOTS_EXPECTED,
    parse_llamacpp_metrics,
    parse_llamacpp_slots,
)
from llmroute.anchor.sources.llamacpp import (
    SOURCE as LLAMACPP,
)
from llmroute.anchor.sources.ollama import parse_ollama_ps
from llmroute.anchor.sources.sglang import parse_sglang_metrics
from llmroute.anchor.sources.signals import merge, unreadable
from llmroute.anchor.sources.vllm import parse_vllm_metrics
from llmroute.backends.engines import engine_kind
from llmroute.errors import SignalSourceError
from llmroute.types import Backend, EngineSignals

Parse = Callable[[str, float], EngineSignals]
MIN_TRANSFER_S = 0.001
"""Shortest body transfer (s) a bytes-per-second reading is taken from."""


class Fetched(NamedTuple):
    """One GET's body ``text``, the ms to its response headers and its body's bytes per
    second (None: the body came too fast to time, module docstring)."""

    text: str
    rtt_ms: float
    bytes_per_s: float | None


async def fetch_timed(session: aiohttp.ClientSession, url: str, timeout_s: float
                      ) -> Fetched:
    """GET ``url``: its body as text, timed (``Fetched``). Raises SignalSourceError on a
    connect error, a timeout (``timeout_s`` seconds for the whole exchange) or a non-2xx
    status."""
    try:
        sent = time.perf_counter()
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            headers = time.perf_counter()
            if resp.status >= 300:
                raise SignalSourceError(f"GET {url}: HTTP {resp.status}")
            body = await resp.read()
            took = time.perf_counter() - headers
            text = await resp.text(errors="replace")
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise SignalSourceError(f"GET {url}: {type(exc).__name__} {exc}".strip()) from exc
    rate = len(body) / took if took >= MIN_TRANSFER_S else None
    return Fetched(text, (headers - sent) * 1000.0, rate)


async def fetch_text(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    """GET ``url`` and return its body as text; raises as ``fetch_timed``."""
    return (await fetch_timed(session, url, timeout_s)).text


def with_net(signals: EngineSignals, fetched: Fetched) -> EngineSignals:
    """``signals`` with the network readings of the poll that fetched them."""
    return replace(signals, net_rtt_ms=fetched.rtt_ms, net_bytes_per_s=fetched.bytes_per_s)


@dataclass(frozen=True)
class PromSource:
    """One endpoint (``path`` under the backend's base URL) and its parser: vLLM, SGLang and
    the emulator (Prometheus text; the emulator speaks vLLM's), Ollama (``/api/ps``)."""

    session: aiohttp.ClientSession
    parse: Parse
    timeout_s: float
    path: str = "/metrics"

    async def poll(self, backend: Backend, now: float) -> EngineSignals:
        """The endpoint's signals at ``now``, with the poll's network readings; raises
        SignalSourceError when unreachable."""
        fetched = await fetch_timed(self.session, backend.base_url + self.path,
                                    self.timeout_s)
        return with_net(self.parse(fetched.text, now), fetched)


@dataclass(frozen=True)
class LlamaCppSource:
    """llama-server: ``metrics_path`` (required) merged with ``slots_path`` (optional)."""

    session: aiohttp.ClientSession
    timeout_s: float
    metrics_path: str = "/metrics"
    slots_path: str = "/slots"

    async def poll(self, backend: Backend, now: float) -> EngineSignals:
        """Both endpoints' signals at ``now``; raises SignalSourceError when the metrics
        endpoint is unreachable."""
        metrics, slots = await asyncio.gather(
            fetch_timed(self.session, backend.base_url + self.metrics_path, self.timeout_s),
            self._slots(backend, now))
        return with_net(merge(parse_llamacpp_metrics(metrics.text, now), slots), metrics)

    async def _slots(self, backend: Backend, now: float) -> EngineSignals:
        try:
            text = await fetch_text(self.session, backend.base_url + self.slots_path,
                                    self.timeout_s)
        except SignalSourceError:
            return unreadable(LLAMACPP, now, SLOTS_EXPECTED)
        return parse_llamacpp_slots(text, now)


@dataclass(frozen=True)
class DcgmSource:
    """A remote DCGM exporter's ``/metrics`` at ``url``, restricted to the ``gpu`` label."""

    session: aiohttp.ClientSession
    url: str
    gpu: str | None
    timeout_s: float

    async def poll(self, backend: Backend, now: float) -> EngineSignals:
        """The GPU signals at ``now``; raises SignalSourceError when unreachable."""
        return parse_dcgm(await fetch_text(self.session, self.url, self.timeout_s), now,
                          self.gpu)


SourceFactory = Callable[[aiohttp.ClientSession, float, tuple[str, ...]],
                         PromSource | LlamaCppSource]
"""``(session, timeout_s, paths) -> source`` for one metrics format."""


def _one_endpoint(parse: Parse) -> SourceFactory:
    return lambda session, timeout_s, paths: PromSource(session, parse, timeout_s, *paths)


FORMATS: Mapping[str, SourceFactory] = {
    "vllm": _one_endpoint(parse_vllm_metrics),
    "sglang": _one_endpoint(parse_sglang_metrics),
    "ollama": _one_endpoint(parse_ollama_ps),
    "llamacpp": lambda session, timeout_s, paths: LlamaCppSource(session, timeout_s, *paths),
}
"""The source of each metrics format of the engine-kind table, by format name."""


def source_for(engine: str, session: aiohttp.ClientSession,
               timeout_s: float) -> PromSource | LlamaCppSource | None:
    """The engine kind's source (its ``MetricsEndpoint`` in ``backends/engines.py``), or
    None for kinds without a metrics endpoint (``openai``)."""
    endpoint = engine_kind(engine).metrics
    if endpoint is None:
        return None
    return FORMATS[endpoint.format](session, timeout_s, endpoint.paths)
