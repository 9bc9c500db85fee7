"""The human kind through the app (httpx.ASGITransport, a scripted upstream): the canned
answer and its headers (JSON and SSE), the ticket queue, the operator API, the client's
fetch of an answered ticket, and the admin key guard."""

from __future__ import annotations

import json
import textwrap

import pytest

from fakes.clock import FakeClock
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from llmroute.assemble.policy import build_policy
from llmroute.assemble.stages import answer_stages
from llmroute.errors import ConfigError
from llmroute.strategy.handoffs import HandoffStore

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "I want to cancel my "
                                                                  "contract, call a lawyer"}]}
HUMAN = """\
    strategy_id: legal
    version: 2
    when: {keywords: [lawyer]}
    kind: human
    message: "A person will answer; ticket {ticket}."
    """


def config(base: str, folder, db, **extra):
    return make_config([{"id": "a", "pool": "general", "base_url": base}], gate={"kind": "rules"},
                       strategies={"dir": str(folder), "watch": False,
                                   "handoffs_path": str(db)}, **extra)


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "strategies"
    d.mkdir()
    (d / "legal.yaml").write_text(textwrap.dedent(HUMAN), encoding="utf-8")
    return d


def _sse(text: str) -> list[dict]:
    lines = [ln[6:] for ln in text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


async def test_a_handoff_answers_at_once_and_queues_a_ticket(folder, tmp_path):
    async with serve_upstream(["ok"]) as up:
        async with open_router(config(up.base_url, folder, tmp_path / "h.db")) as (rt, client):
            r = await client.post(CHAT, json=BODY)
            listed = (await client.get("/admin/handoffs", params={"status": "open"})).json()
    assert r.status_code == 200 and up.requests == []
    ticket = r.headers["x-llmroute-ticket"]
    assert (r.headers["x-llmroute-handoff"], r.headers["x-llmroute-strategy"],
            r.headers["x-llmroute-pool"]) == ("human", "legal@2", "human")
    body = r.json()
    assert body["choices"][0] == {"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": f"A person will answer; ticket {ticket}."}}
    assert body["llmroute"] == {"handoff": {"ticket": ticket, "status": "open"}}
    [t] = listed["data"]
    assert (t["id"], t["status"], t["strategy"], t["conversation"]) == \
        (ticket, "open", "legal@2", BODY["messages"])


async def test_a_streamed_handoff_gets_the_same_answer_as_sse(folder, tmp_path):
    async with serve_upstream(["ok"]) as up:
        async with open_router(config(up.base_url, folder, tmp_path / "h.db")) as (_, client):
            r = await client.post(CHAT, json={**BODY, "stream": True,
                                               "stream_options": {"include_usage": True}})
    assert r.headers["content-type"].startswith("text/event-stream")
    chunks = _sse(r.text)
    ticket = r.headers["x-llmroute-ticket"]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks
                   if c["choices"]) == f"A person will answer; ticket {ticket}."
    assert chunks[1]["choices"][0]["finish_reason"] == "stop"
    assert chunks[1]["llmroute"]["handoff"]["ticket"] == ticket
    assert chunks[2]["choices"] == [] and "usage" in chunks[2]


async def test_operators_claim_and_answer_and_the_client_fetches_it(folder, tmp_path):
    async with serve_upstream(["ok"]) as up:
        async with open_router(config(up.base_url, folder, tmp_path / "h.db")) as (_, client):
            ticket = (await client.post(CHAT, json=BODY)).headers["x-llmroute-ticket"]
            before = (await client.get(f"/v1/handoffs/{ticket}")).json()
            claimed = await client.post(f"/admin/handoffs/{ticket}/claim",
                                        json={"operator": "ann"})
            answered = await client.post(f"/admin/handoffs/{ticket}/answer",
                                         json={"answer": "You may cancel within 14 days.",
                                               "operator": "ann"})
            again = await client.post(f"/admin/handoffs/{ticket}/answer",
                                      json={"answer": "x"})
            after = (await client.get(f"/v1/handoffs/{ticket}")).json()
            shown = (await client.get(f"/admin/handoffs/{ticket}")).json()
    assert before["status"] == "open" and before["answer"] is None
    assert claimed.json()["status"] == "claimed" and claimed.json()["claimed_by"] == "ann"
    assert answered.status_code == 200 and answered.json()["status"] == "answered"
    assert again.status_code == 400 and again.json()["error"]["code"] == "ticket_answered"
    assert after["status"] == "answered"
    assert after["answer"]["choices"][0]["message"]["content"] == \
        "You may cancel within 14 days."
    assert shown["answered_by"] == "ann"


@pytest.mark.parametrize("method,path,payload,status", [
    ("get", "/v1/handoffs/hof-nope", None, 404),
    ("get", "/admin/handoffs/hof-nope", None, 404),
    ("post", "/admin/handoffs/hof-nope/answer", {"answer": "x"}, 404),
    ("post", "/admin/handoffs/hof-nope/answer", {"answer": ""}, 400),
    ("post", "/admin/handoffs/hof-nope/answer", {"text": "x"}, 400),
    ("get", "/admin/handoffs?status=lost", None, 400),
    ("get", "/admin/handoffs?limit=0", None, 400),
], ids=["client-unknown", "admin-unknown", "answer-unknown", "empty-answer",
        "unknown-field", "bad-status", "bad-limit"])
async def test_bad_ticket_requests_are_openai_shaped_4xx(folder, tmp_path, method, path,
                                                         payload, status):
    async with serve_upstream(["ok"]) as up:
        async with open_router(config(up.base_url, folder, tmp_path / "h.db")) as (_, client):
            kw = {"json": payload} if payload is not None else {}
            r = await getattr(client, method)(path, **kw)
    assert r.status_code == status and set(r.json()["error"]) >= {"message", "type", "code"}


async def test_with_auth_on_the_operator_api_needs_the_admin_key(folder, tmp_path):
    async with serve_upstream(["ok"]) as up:
        cfg = config(up.base_url, folder, tmp_path / "h.db",
                     auth={"enabled": True, "keys_path": str(tmp_path / "keys.db"),
                           "admin_key_env": "ADMIN_FOR_TESTS"})
        off = cfg.model_copy(update={"auth": cfg.auth.model_copy(update={"enabled": False})})
        async with open_router(off) as (rt, client):
            clock = FakeClock()
            rt.policy = build_policy(cfg, clock, clock.now, {"ADMIN_FOR_TESTS": "adm"})
            rt.stages = answer_stages(rt)  # the usage meter with the policy
            anonymous = await client.get("/admin/handoffs")
            wrong = await client.get("/v1/handoffs/hof-x")
            admin = await client.get("/admin/handoffs",
                                     headers={"authorization": "Bearer adm"})
            rt.policy.keys.close()
    assert anonymous.status_code == 401 and wrong.status_code == 401
    assert admin.status_code == 200 and admin.json()["data"] == []


async def test_a_broken_ticket_queue_is_a_503_not_a_500(folder, tmp_path):
    async with serve_upstream(["ok"]) as up:
        bad = tmp_path / "no-such-dir" / "h.db"
        async with open_router(config(up.base_url, folder, bad)) as (_, client):
            r = await client.post(CHAT, json=BODY)
    assert r.status_code == 503 and "ticket" in r.json()["error"]["message"]


async def test_debug_route_shows_a_handoff_plan_without_candidates(folder, tmp_path):
    async with serve_upstream(["ok"]) as up:
        async with open_router(config(up.base_url, folder, tmp_path / "h.db")) as (_, client):
            route = (await client.get("/debug/route", params={"query": "a lawyer"})).json()
    assert route["strategy"]["kind"] == "human" and route["plan"]["pool"] == "human"
    assert route["candidates"] == [] and route["backend"] is None


def test_a_human_file_with_an_unknown_field_names_file_line_and_field(loader, write):
    path = write("h.yaml", "strategy_id: h\nversion: 1\nkind: human\nmesage: hi\n")
    with pytest.raises(ConfigError) as err:
        loader.read(path)
    assert f"{path}:4: mesage" in err.value.message


async def test_the_store_lists_newest_first_and_filters_by_status(tmp_path):
    store = HandoffStore(str(tmp_path / "t.db"))
    a = await store.open("s@1", "r1", "chat", "auto", [{"role": "user", "content": "a"}], 1.0)
    b = await store.open("s@1", "r2", "chat", "auto", [{"role": "user", "content": "b"}], 2.0)
    await store.answer(a.id, "done", "op", 3.0)
    assert [t.id for t in await store.list()] == [b.id, a.id]
    assert [t.id for t in await store.list("answered")] == [a.id]
    store.close()
    reopened = HandoffStore(str(tmp_path / "t.db"))
    assert (await reopened.get(a.id)).answer == "done"
    reopened.close()


async def test_reading_an_empty_queue_creates_no_database_file(tmp_path):
    """``GET /admin/handoffs`` on a router that never handed off must not leave a database
    behind (the default path is relative to the working directory)."""
    from llmroute.errors import NotFound
    path = tmp_path / "t.db"
    store = HandoffStore(str(path))
    assert await store.list() == [] and await store.list("open") == []
    with pytest.raises(NotFound):
        await store.get("hof-unknown")
    with pytest.raises(NotFound):
        await store.answer("hof-unknown", "text", "op", 1.0)
    assert not path.exists()
    ticket = await store.open("s@1", "r1", "chat", "auto", [{"role": "user", "content": "a"}],
                              1.0)
    assert path.exists() and [t.id for t in await store.list()] == [ticket.id]
    store.close()


def test_the_handoffs_cli_lists_shows_claims_and_answers(tmp_path, capsys):
    import asyncio

    from llmroute.cli.main import main
    db = tmp_path / "h.db"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("pools: {general: {}}\nbackends:\n  - {id: g, pool: general, engine: vllm, "
                   "base_url: 'http://127.0.0.1:9'}\nrouting: {default_pool: general}\n"
                   f"strategies: {{dir: {tmp_path}, handoffs_path: '{db}'}}\n", encoding="utf-8")
    store = HandoffStore(str(db))
    ticket = asyncio.run(store.open("legal@2", "r1", "chat", "auto",
                                    [{"role": "user", "content": "help"}], 1.0))
    store.close()

    def cli(*argv: str) -> tuple[int, object]:
        code = main(["handoffs", *argv, "--config", str(cfg)])
        out = capsys.readouterr()
        return code, json.loads(out.out) if out.out.strip() else out.err

    assert cli("list", "--status", "open")[1][0]["id"] == ticket.id
    assert cli("claim", ticket.id, "--operator", "bo")[1]["claimed_by"] == "bo"
    code, answered = cli("answer", ticket.id, "Yes.", "--operator", "bo")
    assert code == 0 and (answered["status"], answered["answer"]) == ("answered", "Yes.")
    assert cli("show", ticket.id)[1]["answered_by"] == "bo"
    code, err = cli("answer", ticket.id, "Again")
    assert code == 2 and "answered already" in err
    code, err = cli("show", "hof-missing")
    assert code == 2 and "no hand-off ticket" in err


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_strategy_answer_goes_through_the_output_filter(folder, tmp_path, stream):
    words = tmp_path / "words.txt"
    words.write_text("person\n", encoding="utf-8")
    lists = {"lists": [{"name": "w", "path": str(words), "action": "mask",
                        "mode": "substring", "applies_to": ["output"]}]}
    async with serve_upstream(["ok"]) as up:
        cfg = config(up.base_url, folder, tmp_path / "h.db", content_filter=lists)
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json={**BODY, "stream": stream})
    ticket = r.headers["x-llmroute-ticket"]
    text = ("".join(c["choices"][0]["delta"].get("content", "") for c in _sse(r.text)
                    if c["choices"]) if stream else r.json()["choices"][0]["message"]["content"])
    assert text == f"A ****** will answer; ticket {ticket}."
