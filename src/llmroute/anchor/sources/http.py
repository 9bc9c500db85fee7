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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass

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


async def fetch_text(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    """GET ``url`` and return its body as text. Raises SignalSourceError on a connect error,
    a timeout (``timeout_s`` seconds for the whole exchange) or a non-2xx status."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status >= 300:
                raise SignalSourceError(f"GET {url}: HTTP {resp.status}")
            return await resp.text(errors="replace")
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise SignalSourceError(f"GET {url}: {type(exc).__name__} {exc}".strip()) from exc


@dataclass(frozen=True)
class PromSource:
    """One endpoint (``path`` under the backend's base URL) and its parser: vLLM, SGLang and
    the emulator (Prometheus text; the emulator speaks vLLM's), Ollama (``/api/ps``)."""

    session: aiohttp.ClientSession
    parse: Parse
    timeout_s: float
    path: str = "/metrics"

    async def poll(self, backend: Backend, now: float) -> EngineSignals:
        """The endpoint's signals at ``now``; raises SignalSourceError when unreachable."""
        return self.parse(await fetch_text(self.session, backend.base_url + self.path,
                                           self.timeout_s), now)


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
            fetch_text(self.session, backend.base_url + self.metrics_path, self.timeout_s),
            self._slots(backend, now))
        return merge(parse_llamacpp_metrics(metrics, now), slots)

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
