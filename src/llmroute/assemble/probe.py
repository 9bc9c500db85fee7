"""The health check a backend passes before a reload lets it take traffic.

An engine is healthy when ``GET {base_url}/health`` (llama.cpp, vLLM, SGLang) or
``GET {base_url}/v1/models`` (any OpenAI-compatible API; sent with the backend's key)
answers 200. Both are tried every ``PROBE_EVERY_S`` until one does or the time is up.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from llmroute.types import Backend

PROBE_EVERY_S = 0.25
"""Seconds between two rounds of probes of a backend that is not healthy yet."""


async def unhealthy(backend: Backend, timeout_s: float) -> str | None:
    """None once ``backend`` is healthy within ``timeout_s`` seconds, else why not (the
    last answer or error, one line)."""
    headers = {"authorization": f"Bearer {backend.api_key}"} if backend.api_key else {}
    deadline = time.monotonic() + timeout_s
    why = "no answer"
    async with aiohttp.ClientSession(headers=headers) as session:
        while True:
            for path in ("/health", "/v1/models"):
                why = await _probe(session, backend.base_url + path,
                                   max(deadline - time.monotonic(), 0.05))
                if why is None:
                    return None
            if time.monotonic() + PROBE_EVERY_S >= deadline:
                return f"{why} after {timeout_s:g} s"
            await asyncio.sleep(PROBE_EVERY_S)


async def _probe(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str | None:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return None if resp.status == 200 else f"GET {url} answered {resp.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return f"GET {url} failed: {type(exc).__name__} {exc}".strip()
