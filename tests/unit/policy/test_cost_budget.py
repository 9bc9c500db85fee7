"""Cost budgets through the app on a FakeClock: a request's cost from the engine's real
usage at its pool's price, charged to the key's and tenant's daily/monthly cost budgets in
the state store; a spent budget refuses the next request with OpenAI's
``insufficient_quota`` 429 until its UTC day or month ends, and ends no stream already
admitted."""

from __future__ import annotations

import pytest

from llmroute.policy.keys import Limits

CHAT = "/v1/chat/completions"
PRICE = {"input_per_mtok": 1000.0, "output_per_mtok": 3000.0}
ONE = (5 * 1000.0 + 5 * 3000.0) / 1e6  # the fake engine's usage: 5 prompt, 5 completion
WALL0 = 1_750_000_000


def body(stream: bool = False, **extra):
    return {"model": "auto", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 16, "stream": stream, **extra}


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_a_daily_cost_budget_refuses_once_spent_with_insufficient_quota(gated):
    async with gated(script=["ok"] * 8, price=PRICE) as g:
        secret, key = await g.issue(limits=Limits(daily_cost=2.5 * ONE))
        answers = [await g.client.post(CHAT, json=body(), headers=bearer(secret))
                   for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    refused = answers[-1]
    err = refused.json()["error"]
    assert err["code"] == "insufficient_quota" and err["type"] == "insufficient_quota"
    assert "daily cost budget" in err["message"] and key.display in err["message"]
    assert int(refused.headers["retry-after"]) == 86400 - WALL0 % 86400
    assert len(g.up.requests) == 3  # the refusal reached no engine


async def test_a_tenants_monthly_budget_binds_every_key_of_it(gated):
    async with gated(script=["ok"] * 8, price=PRICE) as g:
        one, _ = await g.issue(tenant_limits=Limits(monthly_cost=1.5 * ONE))
        two, _ = await g.issue()
        codes = [(await g.client.post(CHAT, json=body(), headers=bearer(k))).status_code
                 for k in (one, two, one)]
        refused = await g.client.post(CHAT, json=body(), headers=bearer(two))
    assert codes == [200, 200, 429]
    assert "tenant acme" in refused.json()["error"]["message"]
    assert "monthly cost budget" in refused.json()["error"]["message"]


async def test_an_unpriced_pool_spends_nothing(gated):
    async with gated(script=["ok"] * 4) as g:
        secret, _ = await g.issue(limits=Limits(daily_cost=1e-6))
        codes = [(await g.client.post(CHAT, json=body(), headers=bearer(secret))).status_code
                 for _ in range(3)]
        trace = await g.rt.observer.find((await g.client.post(
            CHAT, json=body(), headers=bearer(secret))).headers["x-request-id"])
    assert codes == [200, 200, 200]
    assert "cost" not in trace.summary


async def test_a_budget_spent_mid_stream_ends_nothing_already_admitted(gated):
    """Two streams admitted while the budget has room; the first one's cost spends it
    while the second is still streaming: the second ends whole, the third request is
    refused."""
    from llmroute.api.wire import parse_chat
    from llmroute.flow import pipeline
    from llmroute.flow.call import Call
    async with gated(script=["ok"] * 3, reply="one two three four five six",
                     price=PRICE) as g:
        secret, _ = await g.issue(limits=Limits(daily_cost=ONE))
        caller = await pipeline.authenticate(g.rt, bearer(secret))
        first = await pipeline.route(Call(g.rt, parse_chat(body(stream=True), "s1"), caller))
        second = await pipeline.route(Call(g.rt, parse_chat(body(stream=True), "s2"), caller))
        head = await anext(second.stream)
        one = b"".join([chunk async for chunk in first.stream])
        two = head + b"".join([chunk async for chunk in second.stream])
        third = await g.client.post(CHAT, json=body(), headers=bearer(secret))
    assert one.rstrip().endswith(b"data: [DONE]") and b'"error"' not in one
    assert two.rstrip().endswith(b"data: [DONE]") and b'"error"' not in two
    assert third.status_code == 429
    assert third.json()["error"]["code"] == "insufficient_quota"


async def test_the_cost_is_on_the_trace_the_log_line_and_the_metric(gated):
    from structlog.testing import capture_logs
    async with gated(script=["ok"], price=PRICE) as g:
        secret, key = await g.issue()
        with capture_logs() as logs:
            r = await g.client.post(CHAT, json=body(), headers=bearer(secret))
        trace = (await g.client.get(f"/trace/{r.headers['x-request-id']}",
                                    headers=bearer(g.admin))).json()
        metrics = (await g.client.get("/metrics", headers=bearer(g.admin))).text
    assert r.status_code == 200
    assert trace["cost"] == pytest.approx(ONE)
    assert trace["cost_by_pool"] == {"general": pytest.approx(ONE)}
    attempt = next(s for s in trace["steps"] if s["step"] == "attempt")
    assert attempt["prompt_tokens"] == 5 and attempt["tokens"] == 5
    assert attempt["cost"] == pytest.approx(ONE)
    line = next(e for e in logs if e.get("event") == "request")
    assert line["cost"] == pytest.approx(ONE)
    sample = (f'llmroute_cost_total{{key="{key.id}",pool="general",tenant="acme"}} '
              f'{ONE!r}')
    assert sample in metrics


async def test_budget_left_falls_as_spend_grows(gated):
    from llmroute.flow import pipeline
    from llmroute.api.wire import parse_chat
    async with gated(script=["ok"] * 4, reply="one two three", price=PRICE) as g:
        secret, _ = await g.issue(limits=Limits(daily_cost=4 * ONE))
        caller = await pipeline.authenticate(g.rt, bearer(secret))
        lefts = []
        for i in range(3):
            ticket = await g.rt.policy.admit(caller, parse_chat(body(), f"r{i}"))
            lefts.append(ticket.budget_left)
            await ticket.settle(10, ONE)
    assert lefts[0] == pytest.approx(1.0)
    assert lefts[1] == pytest.approx(0.75) and lefts[2] == pytest.approx(0.5)
