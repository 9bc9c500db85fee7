"""uvicorn as llmroute runs it (``api/server.py``): ``X-Forwarded-*`` headers are not read,
so no client passes itself off as another address or scheme, and no request pays for
uvicorn's proxy-headers middleware."""

from __future__ import annotations

import httpx

from llmroute.api.server import serve_in_background


async def test_forwarded_headers_change_neither_the_client_nor_the_scheme():
    seen = []

    async def app(scope, receive, send):
        seen.append((scope["client"][0], scope["scheme"]))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with serve_in_background(app) as url, httpx.AsyncClient() as client:
        r = await client.get(url + "/", headers={"x-forwarded-for": "203.0.113.9",
                                                 "x-forwarded-proto": "https"})
    assert r.status_code == 204 and seen == [("127.0.0.1", "http")]
