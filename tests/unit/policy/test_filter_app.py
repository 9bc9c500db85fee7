"""The sensitive-word filter through the app (httpx.ASGITransport) over a scripted
upstream on loopback: block / mask / flag on the request and on streamed and JSON answers,
a word split across SSE chunks, hot reload, bad lists."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.router import make_config, open_router
from fakes.upstream import Upstream, serve_upstream

from llmroute.assemble.watch import word_lists
from llmroute.errors import ConfigError
from llmroute.runtime import Runtime

REPLY = "Hello from the fake engine."


@contextlib.asynccontextmanager
async def filtered(tmp_path: Path, lists: dict[str, tuple[str, str, str]],
                   reply: str = REPLY, **cfg: Any
                   ) -> AsyncIterator[tuple[Runtime, httpx.AsyncClient, Upstream]]:
    """A router whose ``content_filter`` has ``lists`` (name → (words, action, mode))."""
    entries = []
    for name, (words, action, mode) in lists.items():
        (tmp_path / f"{name}.txt").write_text(words, encoding="utf-8")
        entries.append({"name": name, "path": str(tmp_path / f"{name}.txt"),
                        "action": action, "mode": mode})
    async with serve_upstream(["ok"], reply=reply) as up:
        config = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                             content_filter={"lists": entries, **cfg})
        async with open_router(config) as (rt, client):
            yield rt, client, up


def chat(content: str, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": content}],
            "stream": stream, **extra}


def streamed(r: httpx.Response) -> tuple[str, list[Any], list[str]]:
    """(the text, the finish reasons, the raw data lines) of an SSE answer."""
    text, finishes, lines = "", [], []
    for line in r.text.splitlines():
        if not line.startswith("data: "):
            continue
        lines.append(line[6:])
        if line == "data: [DONE]":
            continue
        obj = json.loads(line[6:])
        for c in obj.get("choices") or ():
            text += c["delta"].get("content") or ""
            finishes.append(c.get("finish_reason"))
    return text, [f for f in finishes if f], lines


def hits(rt: Runtime, name: str, action: str, direction: str) -> float:
    value = rt.metrics.registry.get_sample_value(
        "llmroute_content_filter_hits_total",
        {"list": name, "action": action, "direction": direction})
    return value or 0.0


async def test_a_blocked_word_in_the_prompt_is_a_400_that_reaches_no_engine(tmp_path):
    async with filtered(tmp_path, {"arms": ("量子武器\n\nnerve agent\n", "block", "substring")}
                        ) as (rt, client, up):
        ok = await client.post("/v1/chat/completions", json=chat("量子 computing"))
        bad = await client.post("/v1/chat/completions", json=chat("How to make NERVE\u200b ａｇｅｎｔ"))
        tool = await client.post("/v1/chat/completions", json={
            "model": "auto", "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "c1", "type": "function",
                    "function": {"name": "f", "arguments": '{"q": "量子武器"}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"}]})
    assert ok.status_code == 200
    for r in (bad, tool):
        assert r.status_code == 400
        err = r.json()["error"]
        assert err["code"] == "content_filter" and err["type"] == "invalid_request_error"
        assert "arms" in err["message"] and "gent" not in err["message"].lower()
    assert len(up.requests) == 1
    assert hits(rt, "arms", "block", "input") == 2


async def test_a_masked_prompt_reaches_the_engine_masked(tmp_path):
    async with filtered(tmp_path, {"pii": ("secret\n", "mask", "word")}) as (rt, client, up):
        r = await client.post("/v1/chat/completions", json={
            "model": "auto", "messages": [
                {"role": "system", "content": "Keep the SECRET."},
                {"role": "user", "content": [{"type": "text", "text": "my ｓｅｃｒｅｔ, secretly"}]}]})
    assert r.status_code == 200
    sent = up.requests[0]["messages"]
    assert sent[0]["content"] == "Keep the ******."
    assert sent[1]["content"][0]["text"] == "my ******, secretly"
    assert hits(rt, "pii", "mask", "input") == 2


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_phrase_across_two_chunks_is_masked(tmp_path, stream):
    async with filtered(tmp_path, {"m": ("fake engine\n", "mask", "substring")}
                        ) as (rt, client, _):
        r = await client.post("/v1/chat/completions", json=chat("hi", stream))
    assert r.status_code == 200
    text = streamed(r)[0] if stream else r.json()["choices"][0]["message"]["content"]
    assert text == "Hello from the ***********."
    assert hits(rt, "m", "mask", "output") == 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_blocked_answer_ends_with_content_filter(tmp_path, stream):
    async with filtered(tmp_path, {"b": ("FAKE ENGINE\n", "block", "word")}
                        ) as (rt, client, up):
        r = await client.post("/v1/chat/completions", json=chat("hi", stream))
        await asyncio.sleep(0.05)
    assert r.status_code == 200
    if stream:
        text, finishes, lines = streamed(r)
        assert finishes == ["content_filter"] and lines[-1] == "[DONE]"
    else:
        choice = r.json()["choices"][0]
        text, finishes = choice["message"]["content"], [choice["finish_reason"]]
        assert finishes == ["content_filter"]
    assert text == "Hello from the "
    assert hits(rt, "b", "block", "output") == 1


async def test_flag_counts_and_traces_but_changes_nothing(tmp_path):
    async with filtered(tmp_path, {"watch": ("hello\n", "flag", "word")}) as (rt, client, _):
        r = await client.post("/v1/chat/completions", json=chat("hello there", True),
                              headers={"x-request-id": "flag-1"})
        trace = (await client.get("/trace/flag-1")).json()
    assert streamed(r)[0] == REPLY
    assert hits(rt, "watch", "flag", "input") == 1 and hits(rt, "watch", "flag", "output") == 1
    steps = [s for s in trace["steps"] if s["step"] == "filter"]
    assert [(s["list"], s["direction"]) for s in steps] == [("watch", "input"),
                                                            ("watch", "output")]


async def test_no_lists_means_no_filter(tmp_path):
    config = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    async with open_router(config) as (rt, _):
        assert rt.content_filter is None


async def test_a_missing_list_stops_the_start(tmp_path):
    config = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}],
                         content_filter={"lists": [{"name": "x",
                                                    "path": str(tmp_path / "nope.txt")}]})
    with pytest.raises(ConfigError, match=r"nope\.txt:1: cannot read word list"):
        async with open_router(config):
            pass


async def test_a_1mb_line_is_refused_with_its_line_number(tmp_path):
    (tmp_path / "big.txt").write_text("ok\n\n" + "x" * 1_000_000 + "\n", encoding="utf-8")
    config = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}],
                         content_filter={"lists": [{"name": "x",
                                                    "path": str(tmp_path / "big.txt")}]})
    with pytest.raises(ConfigError, match=r"big\.txt:3: entry of 1000000 characters"):
        async with open_router(config):
            pass


async def test_reload_applies_a_good_list_and_keeps_the_old_on_a_bad_one(tmp_path):
    async with filtered(tmp_path, {"b": ("bad\n", "block", "word")}) as (rt, client, _):
        filt = rt.content_filter
        assert filt is not None
        path = tmp_path / "b.txt"
        path.write_text("bad\nhello\n", encoding="utf-8")
        assert (await filt.reload()).outcome == "applied"
        r = await client.post("/v1/chat/completions", json=chat("hello"))
        assert r.status_code == 400
        path.write_text("fine\n" + "y" * 5000 + "\n", encoding="utf-8")
        status = await filt.reload()
        assert status.outcome == "invalid" and "b.txt:2:" in status.messages[0]
        path.unlink()
        assert (await filt.reload()).outcome == "invalid"
        r = await client.post("/v1/chat/completions", json=chat("hello"))
        assert r.status_code == 400  # the old lists still in force
        reloads = rt.metrics.registry.get_sample_value(
            "llmroute_content_filter_reloads_total", {"outcome": "invalid"})
        assert reloads == 2


async def test_the_watcher_reloads_a_changed_list(tmp_path):
    async with filtered(tmp_path, {"b": ("bad\n", "block", "word")}) as (rt, client, _):
        filt = rt.content_filter
        assert filt is not None
        stop = asyncio.Event()
        task = asyncio.create_task(word_lists(filt, [tmp_path / "b.txt"], debounce_ms=20,
                                              stop=stop))
        loaded = filt.status
        for _ in range(100):  # the same list saved again until the watcher reloads it: armed
            (tmp_path / "b.txt").write_text("bad\n", encoding="utf-8")
            if await until(lambda: filt.status is not loaded, 0.1):
                break
        assert filt.status.words == 1
        (tmp_path / "b.txt").write_text("bad\nhello\n", encoding="utf-8")
        assert await until(lambda: filt.status.words == 2, 5.0)
        stop.set()
        await asyncio.wait_for(task, 5)
        assert filt.status.outcome == "applied"
        r = await client.post("/v1/chat/completions", json=chat("hello"))
        assert r.status_code == 400


async def until(ok, timeout_s: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not ok() and loop.time() < deadline:
        await asyncio.sleep(0.02)
    return ok()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("action", "got"), [("mask", "Hello from the ***********."),
                                             ("block", "Hello from the ")])
async def test_the_logged_answer_is_the_one_the_client_got(tmp_path, stream, action, got):
    """With ``log_prompts`` on, the request's log line (and so the audit's answer digest,
    taken from the same trace) holds the answer after the output filter, not the engine's."""
    from structlog.testing import capture_logs

    (tmp_path / "w.txt").write_text("fake engine\n", encoding="utf-8")
    lists = [{"name": "w", "path": str(tmp_path / "w.txt"), "action": action}]
    async with serve_upstream(["ok"], reply=REPLY) as up:
        config = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                             content_filter={"lists": lists}, observe={"log_prompts": True})
        with capture_logs() as logs:
            async with open_router(config) as (_, client):
                r = await client.post("/v1/chat/completions", json=chat("hi", stream))
    text = streamed(r)[0] if stream else r.json()["choices"][0]["message"]["content"]
    assert text == got
    line = next(e for e in logs if e["event"] == "request")
    assert line["answer"] == got
