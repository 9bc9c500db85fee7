"""``budget_left_below``: as a tenant's cost budget runs down its requests move to the
cheaper pool a strategy names, and once the budget is spent the next request is refused
with OpenAI's ``insufficient_quota`` 429."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fakes.clock import FakeClock
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.assemble.policy import build_policy
from llmroute.assemble.stages import answer_stages
from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Limits, Tenant

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 16}
SAVER = ("strategy_id: saver\nversion: 1\npriority: 5\nkind: single\npool: cheap\n"
         "when: {budget_left_below: 0.5}\n")
PRICES = {"premium": {"input_per_mtok": 10.0, "output_per_mtok": 30.0},
          "cheap": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
PREMIUM = (5 * 10.0 + 5 * 30.0) / 1e6  # the fake engine's usage: 5 prompt, 5 completion
CHEAP = (5 * 1.0 + 5 * 2.0) / 1e6


@contextlib.asynccontextmanager
async def budgeted(tmp_path, budget: float, **state: Any) -> AsyncIterator[Any]:
    """(runtime, client, key headers): a premium default pool, a cheap pool, the saver
    strategy and tenant ``acme`` with a daily cost budget of ``budget``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "saver.yaml").write_text(SAVER, encoding="utf-8")
    async with serve_upstream(["ok"] * 32) as premium, serve_upstream(["ok"] * 32) as cheap:
        cfg = make_config([{"id": "p", "pool": "premium", "base_url": premium.base_url},
                           {"id": "c", "pool": "cheap", "base_url": cheap.base_url}],
                          pools={p: {"price": v} for p, v in PRICES.items()},
                          gate={"kind": "rules"},
                          strategies={"dir": str(tmp_path), "watch": False},
                          auth={"enabled": True, "keys_path": str(tmp_path / "k.db"),
                                "admin_key_env": "ADMIN_FOR_TESTS"}, **state)
        clock = FakeClock()
        async with open_router(cfg.model_copy(update={"auth": cfg.auth.model_copy(
                update={"enabled": False})})) as (rt, client):
            rt.policy = build_policy(cfg, clock, lambda: 1.75e9 + clock.now(),
                                     {"ADMIN_FOR_TESTS": "admin-secret-for-tests"})
            rt.stages = answer_stages(rt)  # the usage meter with the policy
            await rt.policy.keys.put_tenant(Tenant("acme", Limits(daily_cost=budget)))
            secret, _ = await issue_key(rt.policy.keys, "acme", 1.75e9)
            yield rt, client, {"authorization": f"Bearer {secret}"}
            await rt.policy.store.close()
            rt.policy.keys.close()


async def pools_until_refused(client, headers, n: int) -> list[str]:
    """The pool of each of ``n`` requests, or the refusal's code."""
    out = []
    for _ in range(n):
        r = await client.post(CHAT, json=BODY, headers=headers)
        out.append(r.headers["x-llmroute-pool"] if r.status_code == 200
                   else f"{r.status_code} {r.json()['error']['code']}")
    return out


async def test_a_budget_running_down_moves_the_tenant_to_the_cheap_pool_then_refuses(tmp_path):
    budget = 2 * PREMIUM + 2.5 * CHEAP
    async with budgeted(tmp_path, budget) as (rt, client, headers):
        seen = await pools_until_refused(client, headers, 8)
    # full budget: premium (left 1.0, then ≈0.55); under half left: the saver's cheap pool
    # until the spend reaches the budget: then 429
    assert seen[:2] == ["premium", "premium"]
    assert seen[2:5] == ["cheap", "cheap", "cheap"]
    assert seen[5:] == ["429 insufficient_quota"] * 3


@pytest.mark.slow
@pytest.mark.redis
async def test_the_budget_is_shared_by_every_replica_through_redis(tmp_path, own_redis):
    """Two routers over one Redis: what one spends, the other sees — its requests move to
    the cheap pool and are refused as the fleet's spend reaches the budget."""
    budget = 2 * PREMIUM + 2.5 * CHEAP
    state = {"state": {"kind": "redis", "url": own_redis.url}}
    async with budgeted(tmp_path / "one", budget, **state) as (_, one, h1), \
            budgeted(tmp_path / "two", budget, **state) as (_, two, h2):
        seen = [*(await pools_until_refused(one, h1, 2)), *(await pools_until_refused(
            two, h2, 3)), *(await pools_until_refused(one, h1, 1))]
    assert seen == ["premium", "premium", "cheap", "cheap", "cheap",
                    "429 insufficient_quota"]
