"""Rate limits, quotas and concurrency through the app on a FakeClock: exact counts under
200 concurrent clients, Retry-After that holds, reservations reconciled with real usage,
leases released however an answer ends."""

from __future__ import annotations

import asyncio
import random

import pytest

from llmroute.policy.keys import Limits

CHAT = "/v1/chat/completions"


def body(max_tokens: int = 16, stream: bool = False, **extra):
    return {"model": "auto", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens, "stream": stream, **extra}


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_rpm_5_refuses_the_6th_with_retry_after_and_headers(gated):
    async with gated() as g:
        secret, key = await g.issue(limits=Limits(rpm=5))
        answers = [await g.client.post(CHAT, json=body(), headers=bearer(secret))
                   for _ in range(6)]
        refused = answers[-1]
        wait = int(refused.headers["retry-after"])
        g.clock.advance(wait - 0.5)
        early = await g.client.post(CHAT, json=body(), headers=bearer(secret))
        g.clock.advance(0.5)
        on_time = await g.client.post(CHAT, json=body(), headers=bearer(secret))
    assert [a.status_code for a in answers] == [200] * 5 + [429]
    assert [a.headers["x-ratelimit-remaining-requests"] for a in answers[:5]] == \
        ["4", "3", "2", "1", "0"]
    assert answers[0].headers["x-ratelimit-limit-requests"] == "5"
    assert answers[0].headers["x-ratelimit-reset-requests"] == "12s"
    err = refused.json()["error"]
    assert err["code"] == "rate_limit_exceeded" and err["type"] == "requests"
    assert key.display in err["message"] and secret not in refused.text
    assert wait == 12 and refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert early.status_code == 429 and on_time.status_code == 200
    assert len(g.up.requests) == 6  # refusals reached no engine


async def test_200_concurrent_clients_on_one_key_admit_exactly_the_limit(gated):
    async with gated() as g:
        secret, _ = await g.issue(limits=Limits(rpm=50, tpm=50 * 40))
        answers = await asyncio.gather(*(g.client.post(CHAT, json=body(max_tokens=30),
                                                       headers=bearer(secret))
                                         for _ in range(200)))
    codes = [a.status_code for a in answers]
    assert codes.count(200) == 50 and codes.count(429) == 150
    assert len(g.up.requests) == 50


async def test_admissions_stay_inside_the_bucket_envelope_in_every_window(gated):
    """200 clients in rounds while the clock moves on: over any window of w seconds the
    admitted requests never pass rpm + rpm/60 · w (no overshoot at all in-process), and the
    tokens they used (each answer's ``usage``, reconciled) never pass tpm + tpm/60 · w by
    more than one reservation."""
    rng = random.Random(7)
    async with gated() as g:
        secret, _ = await g.issue(limits=Limits(rpm=40, tpm=300))
        admitted: list[tuple[float, int]] = []
        for _ in range(6):
            sizes = [rng.choice([8, 40, 120]) for _ in range(200)]
            answers = await asyncio.gather(*(g.client.post(
                CHAT, json=body(max_tokens=n), headers=bearer(secret)) for n in sizes))
            admitted += [(g.clock.now(), a.json()["usage"]["total_tokens"]) for a in answers
                         if a.status_code == 200]
            g.clock.advance(rng.uniform(0.5, 20))
    assert len(admitted) > 20
    largest = 5 + 120
    for i, (start, _) in enumerate(admitted):
        count = tokens = 0
        for at, used in admitted[i:]:
            count, tokens = count + 1, tokens + used
            assert count <= 40 + 40 / 60 * (at - start) + 1e-9
            assert tokens <= 300 + 300 / 60 * (at - start) + largest


async def test_tokens_are_reconciled_with_real_usage(gated):
    async with gated() as g:
        secret, key = await g.issue(limits=Limits(tpm=600))
        first = await g.client.post(CHAT, json=body(max_tokens=500), headers=bearer(secret))
        # reserved prompt + 500, then the engine reported 10 tokens used: 590 come back
        second = await g.client.post(CHAT, json=body(max_tokens=500), headers=bearer(secret))
        big = await g.client.post(CHAT, json=body(max_tokens=5000), headers=bearer(secret))
    assert first.status_code == 200 and second.status_code == 200
    assert int(second.headers["x-ratelimit-remaining-tokens"]) == 600 - 10 - 505
    assert second.headers["x-ratelimit-limit-tokens"] == "600"
    assert big.status_code == 429 and "retry-after" not in big.headers
    assert big.json()["error"]["type"] == "tokens"


async def test_a_stream_is_reconciled_with_what_was_streamed(gated):
    async with gated(reply="one two three four five six") as g:
        secret, key = await g.issue(limits=Limits(tpm=1000))
        r = await g.client.post(CHAT, json=body(max_tokens=400, stream=True),
                                headers=bearer(secret))
        with_usage = await g.client.post(CHAT, json=body(
            max_tokens=400, stream=True, stream_options={"include_usage": True}),
            headers=bearer(secret))
        level = await g.rt.policy.store.reserve([])
        probe = await g.client.post(CHAT, json=body(max_tokens=1), headers=bearer(secret))
    assert r.status_code == 200 and "[DONE]" in r.text and level.allowed
    prompt = 5  # estimate_chat_tokens(["hi"])
    first = prompt + 7  # six words and the finish chunk
    second = 5 + 6  # the engine's usage chunk: 5 prompt + 6 completion tokens
    assert int(probe.headers["x-ratelimit-remaining-tokens"]) == \
        1000 - first - second - (prompt + 1)


async def test_concurrency_leases_cap_requests_in_flight(gated):
    async with gated(script=[("stall", 0.3)]) as g:
        secret, _ = await g.issue(limits=Limits(max_concurrency=2))
        answers = await asyncio.gather(*(g.client.post(
            CHAT, json=body(stream=True), headers=bearer(secret)) for _ in range(3)))
        after = [await g.client.post(CHAT, json=body(), headers=bearer(secret))
                 for _ in range(2)]
    codes = sorted(a.status_code for a in answers)
    assert codes == [200, 200, 429]
    assert [a for a in answers if a.status_code == 429][0].headers["retry-after"] == "1"
    assert [a.status_code for a in after] == [200, 200]


async def test_a_client_leaving_mid_stream_frees_its_lease_and_settles(gated):
    from llmroute.api.wire import parse_chat
    from llmroute.flow import pipeline
    from llmroute.flow.call import Call

    async with gated(script=[("stall", 5)]) as g:
        secret, _ = await g.issue(limits=Limits(max_concurrency=1, tpm=1000))
        caller = await pipeline.authenticate(g.rt, bearer(secret))
        routed = await pipeline.route(Call(g.rt, parse_chat(body(max_tokens=400, stream=True),
                                                             "r1"), caller))
        first = await anext(routed.stream)
        refused = await g.client.post(CHAT, json=body(), headers=bearer(secret))
        await routed.stream.aclose()  # what the app does when the client disconnects
        g.up.script[:] = ["ok"]
        again = await g.client.post(CHAT, json=body(max_tokens=1), headers=bearer(secret))
    assert b"data: " in first and refused.status_code == 429
    assert again.status_code == 200
    # the cut stream was charged its prompt and the one chunk it streamed
    assert int(again.headers["x-ratelimit-remaining-tokens"]) == 1000 - (5 + 1) - (5 + 1)


async def test_errors_release_the_lease_and_give_the_tokens_back(gated):
    async with gated(script=[("status", 500)]) as g:
        secret, _ = await g.issue(limits=Limits(max_concurrency=1, tpm=100))
        failed = [await g.client.post(CHAT, json=body(max_tokens=90), headers=bearer(secret))
                  for _ in range(3)]
    assert [f.status_code for f in failed] == [502] * 3  # not 429: nothing stayed held


async def test_daily_quota_refuses_with_insufficient_quota_until_midnight(gated):
    async with gated() as g:
        secret, _ = await g.issue(limits=Limits(daily_tokens=30))
        first = await g.client.post(CHAT, json=body(max_tokens=20), headers=bearer(secret))
        second = await g.client.post(CHAT, json=body(max_tokens=20), headers=bearer(secret))
    assert first.status_code == 200 and second.status_code == 429
    err = second.json()["error"]
    assert err["code"] == "insufficient_quota" and err["type"] == "insufficient_quota"
    wall = 1_750_000_000
    assert int(second.headers["retry-after"]) == 86400 - wall % 86400


async def test_tenant_limits_apply_on_top_of_each_keys(gated):
    async with gated() as g:
        one, _ = await g.issue(tenant_limits=Limits(rpm=3), limits=Limits(rpm=10))
        two, _ = await g.issue(limits=Limits(rpm=10))
        codes = [(await g.client.post(CHAT, json=body(), headers=bearer(k))).status_code
                 for k in (one, two, one, two)]
        refused = await g.client.post(CHAT, json=body(), headers=bearer(one))
    assert codes == [200, 200, 200, 429]
    assert "tenant acme" in refused.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_no_limits_means_no_rate_headers(gated, stream):
    async with gated() as g:
        secret, _ = await g.issue()
        r = await g.client.post(CHAT, json=body(stream=stream), headers=bearer(secret))
    assert r.status_code == 200 and not any(h.startswith("x-ratelimit") for h in r.headers)


async def test_a_spent_daily_quota_opens_again_at_utc_midnight_and_monthly_at_the_month():
    from llmroute.config.policy import LimitsConfig
    from llmroute.errors import RateLimited
    from llmroute.policy.auth import Caller
    from llmroute.policy.keys import ApiKey, Tenant
    from llmroute.policy.limits import Limiter
    from llmroute.state.memory import MemoryStore
    from llmroute.types import ChatRequest

    wall = [1_767_225_599.0]  # 2025-12-31 23:59:59 UTC
    limiter = Limiter(MemoryStore(lambda: wall[0]), LimitsConfig(), lambda: wall[0])
    who = Caller(ApiKey("key_1", "lr-abc", "acme",
                        limits=Limits(daily_tokens=100, monthly_tokens=250)), Tenant("acme"))
    request = ChatRequest("chat", {}, "auto", False, "hi", 20, 80, "r1")  # 100 tokens
    await limiter.admit(who, request)
    with pytest.raises(RateLimited) as refused:
        await limiter.admit(who, request)
    assert refused.value.retry_after_s == 1.0  # the day ends in 1 s
    wall[0] += 2.0  # 2026-01-01 00:00:01: a new day and a new month
    await limiter.admit(who, request)
    wall[0] += 86400.0  # 2026-01-02: the day's quota again; the month's has 150 left
    await limiter.admit(who, request)
    with pytest.raises(RateLimited):
        await limiter.admit(who, request)  # the day's 100 are spent
    wall[0] += 86400.0
    with pytest.raises(RateLimited) as month:
        await limiter.admit(who, request)  # 200 of the month's 250 spent: 100 do not fit
    assert month.value.code == "insufficient_quota"


async def test_a_quota_counter_rolls_over_at_midnight_even_within_a_second():
    from llmroute.config.policy import LimitsConfig
    from llmroute.errors import RateLimited
    from llmroute.policy.auth import Caller
    from llmroute.policy.keys import ApiKey, Tenant
    from llmroute.policy.limits import Limiter
    from llmroute.state.memory import MemoryStore
    from llmroute.types import ChatRequest

    wall = [1_767_225_599.5]  # 2025-12-31 23:59:59.5 UTC
    limiter = Limiter(MemoryStore(lambda: wall[0]), LimitsConfig(), lambda: wall[0])
    who = Caller(ApiKey("key_1", "lr-abc", "acme", limits=Limits(daily_tokens=100)),
                 Tenant("acme"))
    request = ChatRequest("chat", {}, "auto", False, "hi", 20, 80, "r1")  # 100 tokens
    await limiter.admit(who, request)
    wall[0] += 0.25  # still the old day: its quota is spent
    with pytest.raises(RateLimited):
        await limiter.admit(who, request)
    wall[0] += 0.5  # 00:00:00.25, under a second after the last call: a new day
    await limiter.admit(who, request)
