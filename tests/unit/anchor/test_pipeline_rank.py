"""``rank.rank_plan``: the plan's pool through the pool filter, fallbacks ranked only when the
primaries leave attempts unused; ``pipeline.route`` counts a prompt as pending prefill until
its first token and teaches the TTFT model."""

from __future__ import annotations

import aiohttp
import pytest
from fakes.anchor_ctx import request
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.assemble.runtime import make_backends, wire
from llmroute.flow.rank import rank_plan
from llmroute.types import Intent, RoutePlan

URL = "http://127.0.0.1:9"
CHAT = "/v1/chat/completions"


def fleet(max_attempts: int):
    rows = [("a", "code"), ("b", "code"), ("c", "code"), ("x", "chat"), ("y", "chat")]
    return make_config([{"id": i, "pool": p, "base_url": URL} for i, p in rows],
                       retry={"max_attempts": max_attempts})


async def ranked(max_attempts: int, plan: RoutePlan, busy: tuple[str, ...] = ()):
    cfg = fleet(max_attempts)
    async with aiohttp.ClientSession() as session:
        rt = wire(cfg, make_backends(cfg, {}), session)
        for bid in busy:
            rt.stats.sent(bid, 1, 0.0)
        return rank_plan(rt, request(), Intent("chat", 1.0), plan)


def _ids(cands) -> list[str]:
    return [c.backend.id for c in cands]


async def test_fallbacks_are_only_filtered_when_primaries_fill_the_budget():
    plan = RoutePlan("code", "test", ("a", "b", "c"), ("x", "y"), max_attempts=3)
    cands = await ranked(3, plan, busy=("a", "x"))
    assert _ids(cands) == ["b", "c", "a", "x", "y"]  # x busy, yet left in plan order
    assert [(c.score, c.scores) for c in cands[3:]] == [(0.0, {}), (0.0, {})]


async def test_fallbacks_are_ranked_when_attempts_are_left():
    plan = RoutePlan("code", "test", ("a", "b"), ("x", "y"), max_attempts=3)
    cands = await ranked(3, plan, busy=("x",))
    assert _ids(cands) == ["a", "b", "y", "x"]
    assert cands[2].scores and cands[2].score > cands[3].score


async def test_primaries_outside_the_plans_pool_follow_as_fallbacks():
    plan = RoutePlan("code", "served model", ("x", "a", "b"), (), max_attempts=3)
    cands = await ranked(3, plan, busy=("a",))
    assert _ids(cands) == ["b", "a", "x"]


async def test_streamed_request_counts_pending_prefill_and_learns_ttft():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (rt, client):
            body = {"model": "auto", "stream": True,
                    "messages": [{"role": "user", "content": "hello " * 200}]}
            r = await client.post(CHAT, json=body)
            assert r.status_code == 200
            a = rt.stats.snapshot(rt.clock()).stats["a"]
            assert a.prefill_tokens == 0
            assert a.prefill_ms_per_token is not None and a.prefill_ms_per_token > 0


async def test_non_streamed_request_releases_its_prefill_without_learning():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (rt, client):
            body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
            assert (await client.post(CHAT, json=body)).status_code == 200
            a = rt.stats.snapshot(rt.clock()).stats["a"]
            assert (a.prefill_tokens, a.prefill_ms_per_token) == (0, None)


@pytest.mark.parametrize("script", [[("status", 500, None)], [("status", 400, None)]],
                         ids=["server-error", "client-error"])
async def test_failed_request_releases_its_prefill(script):
    async with serve_upstream(script) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (rt, client):
            body = {"model": "auto", "stream": True,
                    "messages": [{"role": "user", "content": "hi"}]}
            r = await client.post(CHAT, json=body)
            assert r.status_code >= 400
            assert rt.stats.snapshot(rt.clock()).stats["a"].prefill_tokens == 0


@pytest.mark.parametrize("contexts,expected", [
    ((4096, 4096, 4096, 4096), ["c", "d"]),
    ((4096, 8192, 4096, 4096), ["c", "d", "a", "b"]),
], ids=["equal-contexts-stop-at-the-budget", "mixed-contexts-keep-all"])
async def test_primaries_stop_at_the_attempt_budget_only_when_contexts_are_equal(
        contexts, expected):
    cfg = make_config([{"id": i, "pool": "code", "base_url": URL, "context_length": n}
                       for i, n in zip("abcd", contexts)], retry={"max_attempts": 2})
    plan = RoutePlan("code", "test", ("a", "b", "c", "d"), (), max_attempts=2)
    async with aiohttp.ClientSession() as session:
        rt = wire(cfg, make_backends(cfg, {}), session)
        for bid in ("a", "b", "b"):
            rt.stats.sent(bid, 1, 0.0)
        assert _ids(rank_plan(rt, request(), Intent("chat", 1.0), plan)) == expected
