"""Issue 22's bad input, each through the app: a malformed key, a 10 kB key, headers with
non-ASCII bytes, a word list with an empty line or a 1 MB line, a priority header naming no
class, a tokenizer endpoint that hangs. Each gets a clear OpenAI-shaped 4xx or a logged
fallback — never a 500, never a hang — and a key never shows in the logs, the trace, the
decision audit or an error body (only its id and display prefix)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time

import pytest
import structlog
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.errors import ConfigError
from llmroute.observe import audit_chain

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
CLASSES = [{"name": "standard", "ttft_target_s": 20}, {"name": "batch", "ttft_target_s": 60}]
KEY_HEADERS = (b"authorization", b"x-api-key")
BAD_KEYS = {"malformed": b"Bearer lr-not-a-key", "10kB": b"Bearer lr-" + b"k" * 10_240,
            "non-ascii": b"Bearer lr-\xff\xfe\x80" + b"x" * 29,
            "latin1": b"Bearer lr-" + "é".encode("latin-1") * 32}


def openai_error(r, status: int) -> dict:
    """The error object of an OpenAI-shaped ``status`` answer."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "code"}
    return err


@pytest.mark.parametrize("value", list(BAD_KEYS.values()), ids=list(BAD_KEYS))
async def test_bad_keys_are_401_and_never_echoed(gated, value):
    async with gated() as g:
        with structlog.testing.capture_logs() as logs:
            answers = [await asyncio.wait_for(g.client.post(
                CHAT, json=BODY, headers=[(h, value)]), 10) for h in KEY_HEADERS]
    secret = value.removeprefix(b"Bearer ").decode("latin-1")
    for r in answers:
        assert openai_error(r, 401)["code"] == "invalid_api_key"
        assert secret[3:20] not in r.text
    assert secret[3:20] not in repr(logs)
    assert g.up.requests == []


@pytest.mark.parametrize("header", [b"x-request-id", b"traceparent", b"x-llmroute-priority",
                                    b"x-llmroute-strategy", b"content-type"])
async def test_non_ascii_bytes_in_any_header_never_give_a_500(gated, header):
    async with gated() as g:
        secret, _ = await g.issue()
        r = await asyncio.wait_for(g.client.post(CHAT, json=BODY, headers=[
            (b"authorization", f"Bearer {secret}".encode()), (header, b"\xff\xfe caf\xc3\xa9")]),
            10)
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        openai_error(r, r.status_code)


async def test_a_served_key_shows_only_its_id_in_the_log_line_and_trace(gated):
    async with gated() as g:
        secret, key = await g.issue()
        with structlog.testing.capture_logs() as logs:
            ok = await g.client.post(CHAT, json=BODY, headers={"authorization": f"Bearer {secret}"})
        rid = ok.headers["x-request-id"]
        trace = await g.client.get(f"/trace/{rid}", headers={"authorization": f"Bearer {g.admin}"})
        prov = await g.client.get(f"/trace/{rid}?format=prov",
                                  headers={"authorization": f"Bearer {g.admin}"})
    assert ok.status_code == 200 and trace.status_code == 200 and prov.status_code == 200
    assert trace.json()["key_id"] == key.id
    for text in (repr(logs), trace.text, prov.text, ok.text):
        assert secret not in text and secret[3:20] not in text
    assert any(e.get("key_id") == key.id for e in logs)  # the request's log line


async def test_the_audit_keeps_key_ids_never_keys(tmp_path):
    path = tmp_path / "audit.sqlite3"
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          gate={"kind": "off"}, observe={"audit": {"path": str(path)}})
        async with open_router(cfg) as (rt, client):
            r = await client.post(CHAT, json=BODY, headers={
                "authorization": "Bearer sk-upstream-style-secret-0123456789"})
            assert rt.observer.audit is not None
            await rt.observer.audit.close()
    assert r.status_code == 200
    with sqlite3.connect(path) as conn:
        rows = audit_chain.show(conn, r.headers["x-request-id"])
    assert rows and "upstream-style-secret" not in json.dumps(rows)


async def test_a_word_list_with_empty_lines_loads_and_blocks_its_words(tmp_path):
    (tmp_path / "w.txt").write_text("\n\nforbidden\n   \n\n", encoding="utf-8")
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          gate={"kind": "off"}, content_filter={"watch": False, "lists": [
                              {"name": "w", "path": str(tmp_path / "w.txt")}]})
        async with open_router(cfg) as (_, client):
            fine = await client.post(CHAT, json=BODY)
            blocked = await client.post(CHAT, json={**BODY, "messages": [
                {"role": "user", "content": "say forbidden"}]})
    assert fine.status_code == 200
    assert openai_error(blocked, 400)["code"] == "content_filter"
    assert len(up.requests) == 1


async def test_a_word_list_with_a_1mb_line_is_refused_with_its_line(tmp_path):
    (tmp_path / "big.txt").write_text("ok\n\n" + "x" * 1_000_000 + "\n", encoding="utf-8")
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}],
                      content_filter={"lists": [{"name": "x", "path": str(tmp_path / "big.txt")}]})
    with pytest.raises(ConfigError, match=r"big\.txt:3: entry of 1000000 characters"):
        async with open_router(cfg):
            pass


@pytest.mark.parametrize("value", [b"urgent", b"", b"\xff\xfe", b"batch" * 2000],
                         ids=["unknown", "empty", "non-ascii", "10kB"])
async def test_a_priority_header_naming_no_class_is_a_400(value):
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          gate={"kind": "off"}, priority={"classes": CLASSES})
        async with open_router(cfg) as (_, client):
            r = await asyncio.wait_for(client.post(
                CHAT, json=BODY, headers=[(b"x-llmroute-priority", value)]), 10)
    assert openai_error(r, 400)["code"] == "invalid_priority"
    assert up.requests == []


async def test_a_hanging_tokenizer_falls_back_logged_within_its_bound():
    prompt = "word " * 780  # near the 1000-token context: the engine's tokenizer is asked
    async with serve_upstream(["ok", "ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url,
                            "context_length": 1000}], gate={"kind": "off"},
                          tokens={"timeout_ms": 50})
        async with open_router(cfg) as (_, client):
            up.tokenize = ("hang", 30)
            with structlog.testing.capture_logs() as logs:
                t0 = time.perf_counter()
                r = await asyncio.wait_for(client.post(CHAT, json={
                    **BODY, "messages": [{"role": "user", "content": prompt}]}), 10)
                elapsed = time.perf_counter() - t0
    assert r.status_code in (200, 400), r.text
    assert elapsed < 5
    assert any(e["event"] == "tokenizer_failing" for e in logs)
