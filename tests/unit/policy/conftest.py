"""A router with auth on over a scripted upstream, on a FakeClock: ``gated(...)`` yields a
``Gated`` (runtime, httpx client, clock, ``issue(...)`` making a key, the admin key)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fakes.clock import FakeClock
from fakes.router import make_config, open_router
from fakes.upstream import Upstream, serve_upstream

from llmroute.assemble.policy import build_policy
from llmroute.assemble.stages import answer_stages
from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Limits, Tenant
from llmroute.runtime import Runtime

ADMIN = "admin-secret-for-tests"
WALL0 = 1_750_000_000.0


@dataclass
class Gated:
    rt: Runtime
    client: httpx.AsyncClient
    clock: FakeClock
    up: Upstream
    admin: str = ADMIN

    async def issue(self, tenant: str = "acme", tenant_limits: Limits = Limits(),
                    **fields: Any) -> tuple[str, Any]:
        assert self.rt.policy is not None
        keys = self.rt.policy.keys
        if await keys.tenant(tenant) is None:
            await keys.put_tenant(Tenant(tenant, tenant_limits))
        return await issue_key(keys, tenant, WALL0 + self.clock.now(), **fields)


@pytest.fixture
def gated(tmp_path):
    @contextlib.asynccontextmanager
    async def open_gated(script: list[Any] | None = None, reply: str = "Hello from the fake "
                         "engine.", price: dict[str, float] | None = None,
                         **auth: Any) -> AsyncIterator[Gated]:
        async with serve_upstream(script or ["ok"], reply) as up:
            cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                              gate={"kind": "off"}, auth={
                                  "enabled": True, "keys_path": str(tmp_path / "keys.db"),
                                  "admin_key_env": "ADMIN_FOR_TESTS", **auth},
                              pools={"general": {} if price is None else {"price": price}})
            clock = FakeClock()
            async with open_router(cfg.model_copy(update={"auth": cfg.auth.model_copy(
                    update={"enabled": False})})) as (rt, client):
                rt.policy = build_policy(cfg, clock, lambda: WALL0 + clock.now(),
                                         {"ADMIN_FOR_TESTS": ADMIN})
                rt.stages = answer_stages(rt)  # the usage meter with the policy
                yield Gated(rt, client, clock, up)
                rt.policy.keys.close()
    return open_gated

