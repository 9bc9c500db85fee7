"""Limits through the app with ``state: {kind: redis}`` on a real redis-server that is
killed and started again mid-test: enforced while Redis answers, not enforced (fail open,
logged once, counted) or refused with an OpenAI-shaped 503 (fail closed) while it is
down, enforced again once it is back (an empty Redis is fresh limits)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fakes.clock import FakeClock
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from structlog.testing import capture_logs

from llmroute.assemble.policy import build_policy
from llmroute.assemble.stages import answer_stages
from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Limits, Tenant

pytestmark = [pytest.mark.slow, pytest.mark.redis]

CHAT = "/v1/chat/completions"
ADMIN = "admin-secret-for-tests"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@contextlib.asynccontextmanager
async def redis_router(tmp_path, url: str, **state: Any) -> AsyncIterator[Any]:
    """(runtime, client, headers of a key with ``rpm: 3``) over Redis at ``url``."""
    async with serve_upstream(["ok"] * 64) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          gate={"kind": "off"},
                          auth={"enabled": True, "keys_path": str(tmp_path / "keys.db"),
                                "admin_key_env": "ADMIN_FOR_TESTS"},
                          limits={"state_timeout_s": 0.1},
                          state={"kind": "redis", "url": url, "retry_s": 0.0, **state})
        off = cfg.model_copy(update={"auth": cfg.auth.model_copy(update={"enabled": False})})
        async with open_router(off) as (rt, client):
            rt.policy = build_policy(cfg, FakeClock(), time.time, {"ADMIN_FOR_TESTS": ADMIN},
                                     registry=rt.metrics.registry)
            rt.stages = answer_stages(rt)  # the usage meter with the policy
            await rt.policy.keys.put_tenant(Tenant("acme", Limits(tpm=10_000,
                                                                  daily_tokens=100_000)))
            secret, _ = await issue_key(rt.policy.keys, "acme", time.time(),
                                        limits=Limits(rpm=3, max_concurrency=5))
            yield rt, client, {"authorization": f"Bearer {secret}"}
            await rt.policy.store.close()
            rt.policy.keys.close()


async def codes(client, headers, n: int) -> list[int]:
    return [(await client.post(CHAT, json=BODY, headers=headers)).status_code
            for _ in range(n)]


async def test_limits_fail_open_while_redis_is_down_and_hold_again_after(tmp_path, own_redis):
    async with redis_router(tmp_path, own_redis.url) as (rt, client, headers):
        assert await codes(client, headers, 4) == [200, 200, 200, 429]
        own_redis.kill()
        with capture_logs() as logs:
            down = await codes(client, headers, 5)
        metrics = (await client.get("/metrics", headers={
            "authorization": f"Bearer {ADMIN}"})).text
        own_redis.start()  # empty: fresh limits
        back = await codes(client, headers, 4)
    assert down == [200] * 5
    assert [e["event"] for e in logs if e["event"].startswith("state_store")] == \
        ["state_store_unavailable"]
    assert "llmroute_state_up 0.0" in metrics
    # one state-store call (admit: leases and charges at once) per request
    assert 'llmroute_state_unavailable_calls_total{outcome="unmetered"} 5.0' in metrics
    assert back == [200, 200, 200, 429]


async def test_fail_closed_refuses_with_an_openai_shaped_503(tmp_path, own_redis):
    async with redis_router(tmp_path, own_redis.url, fail_closed=True) as (_, client, headers):
        assert await codes(client, headers, 1) == [200]
        own_redis.kill()
        started = time.monotonic()
        refused = await client.post(CHAT, json=BODY, headers=headers)
        took = time.monotonic() - started
        own_redis.start()
        again = await codes(client, headers, 1)
    assert refused.status_code == 503 and took < 1.0
    err = refused.json()["error"]
    assert err["type"] == "service_unavailable" and err["code"] == "state_unavailable"
    assert again == [200]


async def test_the_names_of_one_admission_share_one_hash_slot(tmp_path, own_redis):
    import redis.asyncio as aioredis
    from redis.crc import key_slot
    async with redis_router(tmp_path, own_redis.url) as (_, client, headers):
        assert await codes(client, headers, 1) == [200]
    admin = aioredis.Redis.from_url(own_redis.url)
    names = [k.decode() for k in await admin.keys("llmroute:*")]
    await admin.aclose()
    charged = [n for n in names if not n.startswith("llmroute:conc:")]
    assert {n.split(":")[1] for n in charged} == {"rpm", "tpm", "qd"}
    assert len(charged) == 3 and len({key_slot(n.encode()) for n in charged}) == 1
