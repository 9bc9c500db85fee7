"""Build a real router (Runtime + app) over scripted upstreams, reached through
``httpx.ASGITransport`` — the app's real request path without a socket on the client side."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
import httpx2

from llmroute.api.app import create_app
from llmroute.config import Config
from llmroute.assemble.runtime import make_backends, wire
from llmroute.runtime import Runtime


def make_config(backends: list[dict[str, Any]], **extra: Any) -> Config:
    """A Config with one pool per distinct ``pool`` and the first pool as default; stored
    responses in memory unless ``extra`` says otherwise (no file beside the tests)."""
    pools = {b["pool"]: {} for b in backends}
    data = {"pools": pools, "backends": [{"engine": "vllm", **b} for b in backends],
            "routing": {"default_pool": backends[0]["pool"]},
            "responses": {"path": ":memory:"}, **extra}
    return Config.model_validate(data)


def strategy_config(ups: dict[str, list[Any]], folder: Any, **extra: Any) -> Config:
    """A Config over scripted upstreams ``{pool: [upstream, …]}`` (backend ids
    ``<pool>-<i>``, the first pool the default), the rules gate and the strategy files in
    ``folder`` (not watched)."""
    backends = [{"id": f"{pool}-{i}", "pool": pool, "base_url": up.base_url}
                for pool, group in ups.items() for i, up in enumerate(group)]
    return make_config(backends, gate={"kind": "rules"},
                       strategies={"dir": str(folder), "watch": False}, **extra)


@contextlib.asynccontextmanager
async def open_router(config: Config) -> AsyncIterator[tuple[Runtime, httpx.AsyncClient]]:
    """A Runtime over ``config``'s base URLs and an httpx client talking to its app."""
    async with aiohttp.ClientSession() as session:
        rt = wire(config, make_backends(config, {}), session)
        app = create_app(config, runtime=rt)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://router") as client:
            yield rt, client



def httpx2_client(client: httpx.AsyncClient) -> httpx2.AsyncClient:
    """An ``httpx2`` client on the same app as ``client`` (an ``open_router`` client): the
    ``anthropic`` SDK takes only ``httpx2`` clients."""
    app = client._transport.app  # type: ignore[attr-defined]
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                              base_url="http://router")
