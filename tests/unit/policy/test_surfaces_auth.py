"""The translated surfaces under auth: ``/v1/messages`` takes the key in ``x-api-key`` (as
Anthropic clients send it) and refuses in Anthropic's shape; its requests are admitted and
limited as chat requests; a stored response belongs to its tenant — another tenant's id is
a 404 on GET, DELETE and as ``previous_response_id``, and its content never leaves."""

from __future__ import annotations

from llmroute.policy.keys import Limits
from llmroute.state.responses import SqliteResponses

MESSAGE = {"model": "auto", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}


async def test_messages_take_x_api_key_and_refuse_in_anthropics_shape(gated):
    async with gated() as g:
        key, _ = await g.issue(limits=Limits(rpm=1))
        ok = await g.client.post("/v1/messages", json=MESSAGE, headers={
            "x-api-key": key, "anthropic-version": "2023-06-01"})
        limited = await g.client.post("/v1/messages", json=MESSAGE,
                                      headers={"x-api-key": key})
        anonymous = await g.client.post("/v1/messages", json=MESSAGE)
        count = await g.client.post("/v1/messages/count_tokens", json={
            "model": "auto", "messages": MESSAGE["messages"]})
    assert ok.status_code == 200 and ok.json()["type"] == "message"
    assert (limited.status_code, limited.json()["error"]["type"]) == (429, "rate_limit_error")
    assert int(limited.headers["retry-after"]) >= 1
    assert (anonymous.status_code, anonymous.json()["error"]["type"]) == (
        401, "authentication_error")
    assert (count.status_code, count.json()["error"]["type"]) == (401, "authentication_error")
    assert len(g.up.requests) == 1


async def test_a_stored_response_is_its_tenants_only(gated, tmp_path):
    async with gated() as g:
        g.rt.responses = SqliteResponses(str(tmp_path / "r.db"), 60.0, 100)
        mine, _ = await g.issue(tenant="acme")
        theirs, _ = await g.issue(tenant="globex")
        made = await g.client.post("/v1/responses", json={"model": "auto", "input": "secret"},
                                   headers={"authorization": f"Bearer {mine}"})
        rid = made.json()["id"]
        other = {"authorization": f"Bearer {theirs}"}
        peek = await g.client.get(f"/v1/responses/{rid}", headers=other)
        drop = await g.client.delete(f"/v1/responses/{rid}", headers=other)
        follow = await g.client.post("/v1/responses", headers=other, json={
            "model": "auto", "input": "what did I say?", "previous_response_id": rid})
        own = await g.client.get(f"/v1/responses/{rid}",
                                 headers={"authorization": f"Bearer {mine}"})
    for answer in (peek, drop, follow):
        assert answer.status_code == 404 and "secret" not in answer.text
        assert answer.json()["error"]["type"] == "not_found_error"
    assert own.status_code == 200 and own.json()["output"][0]["content"][0]["text"]
    assert len(g.up.requests) == 1
