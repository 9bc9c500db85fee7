"""``GET /dashboard`` (one self-contained UTF-8 page: no CDN, nothing fetched from elsewhere)
and ``GET /debug/requests`` (the newest traces' summary lines, newest first)."""

from __future__ import annotations

import re

import pytest
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
SECTIONS = ("topology", "watermarks", "health", "fuse-heatmap", "rates", "decisions")


def config(url: str = "http://127.0.0.1:9"):
    return make_config([{"id": "a", "pool": "general", "base_url": url}])


async def test_the_page_is_self_contained_utf8_with_six_sections():
    async with open_router(config()) as (_, client):
        r = await client.get("/dashboard")
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    page = r.content.decode("utf-8")
    for name in SECTIONS:
        assert page.count(f'data-testid="{name}"') == 1, name
    assert "拓扑" in page and '<meta charset="utf-8">' in page
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"(https?:)?//", page)
    assert set(re.findall(r"https?://[^\"' )]+", page)) == {"http://www.w3.org/2000/svg"}
    for path in ("/debug/backends", "/debug/fuse", "/debug/requests", "/metrics", "/trace/"):
        assert path in page, path


async def test_recent_requests_newest_first_with_their_decisions():
    async with serve_upstream(["ok"]) as up, open_router(config(up.base_url)) as (_, client):
        for i in range(3):
            await client.post(CHAT, json={"model": "auto", "stream": i == 2, "messages": [
                {"role": "user", "content": "写一首诗"}]}, headers={"x-request-id": f"r{i}"})
        lines = (await client.get("/debug/requests?limit=2")).json()["requests"]
    assert [x["request_id"] for x in lines] == ["r2", "r1"]
    newest = lines[0]
    assert newest["backend"] == "a" and newest["pool"] == "general" and newest["status"] == 200
    assert newest["intent"] and newest["strategy"].startswith("builtin-single@")
    assert newest["ttft_ms"] > 0 and newest["handoffs"] == [] and newest["tokens_out"] > 0
    assert lines[1]["ttft_ms"] is None and lines[1]["tokens_out"] == 5  # not streamed
    assert lines[0]["at"] >= lines[1]["at"]


async def test_no_requests_is_an_empty_list():
    async with open_router(config()) as (_, client):
        assert (await client.get("/debug/requests")).json() == {"requests": []}


@pytest.mark.parametrize("limit", ["0", "501", "abc", "-1", "1.5", "9" * 400],
                         ids=["zero", "too-many", "word", "negative", "fraction", "huge"])
async def test_a_bad_limit_is_an_openai_shaped_400(limit):
    async with open_router(config()) as (_, client):
        r = await client.get(f"/debug/requests?limit={limit}")
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "limit"
