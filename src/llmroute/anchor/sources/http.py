"""Polling sources over HTTP: fetch an engine's metrics endpoint(s) and parse them with the
pure parsers next door. One source per engine kind (``source_for``); DCGM for remote GPUs.

Contract (DESIGN.md §4, ``MetricsSource``): ``await source.poll(backend, now)`` returns one
``EngineSignals`` taken at ``now`` (the caller's clock, seconds). An endpoint that cannot be
read (connect error, timeout, an HTTP error status on the main endpoint) raises
``SignalSourceError`` so the collector can back off; a body that does not parse is not an
error, it is a snapshot with the signals missing. llama.cpp's ``/slots`` is optional (it
404s without ``--slots``): its failure only leaves the slot signals missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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
from llmroute.anchor.sources.signals import EngineSignals, merge, unreadable
from llmroute.anchor.sources.vllm import parse_vllm_metrics
from llmroute.errors import SignalSourceError
from llmroute.types import Backend

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
    """One Prometheus-text endpoint (``path`` under the backend's base URL) and its parser:
    vLLM, SGLang, and the emulator (which speaks vLLM's format)."""

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
    """llama-server: ``/metrics`` (required) merged with ``/slots`` (optional)."""

    session: aiohttp.ClientSession
    timeout_s: float

    async def poll(self, backend: Backend, now: float) -> EngineSignals:
        """Both endpoints' signals at ``now``; raises SignalSourceError when ``/metrics`` is
        unreachable."""
        metrics, slots = await asyncio.gather(
            fetch_text(self.session, backend.base_url + "/metrics", self.timeout_s),
            self._slots(backend, now))
        return merge(parse_llamacpp_metrics(metrics, now), slots)

    async def _slots(self, backend: Backend, now: float) -> EngineSignals:
        try:
            text = await fetch_text(self.session, backend.base_url + "/slots", self.timeout_s)
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


def source_for(engine: str, session: aiohttp.ClientSession,
               timeout_s: float) -> PromSource | LlamaCppSource | None:
    """The engine-kind's source, or None for kinds without a metrics endpoint (``openai``)."""
    if engine in ("vllm", "emulator"):
        return PromSource(session, parse_vllm_metrics, timeout_s)
    if engine == "sglang":
        return PromSource(session, parse_sglang_metrics, timeout_s)
    if engine == "llamacpp":
        return LlamaCppSource(session, timeout_s)
    if engine == "ollama":
        return PromSource(session, parse_ollama_ps, timeout_s, "/api/ps")
    return None
