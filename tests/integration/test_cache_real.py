"""The answer cache through two real ``llmroute serve`` replicas sharing a real Redis, in
front of a scripted engine on loopback (its reply changed between requests, so an answer
that still carries the old reply came from the cache), read with the ``openai`` SDK: an
identical request is a ``hit-exact`` (JSON and SSE, with zero usage), a near-identical one a
``hit-semantic`` (the real gate's encoder), another capital is a miss, one tenant's entry is
never another's, the second replica serves the first one's entry, and the purge call."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from fakes.fleet import ADMIN_KEY, ENV, Replica, fleet_config
from fakes.redis import free_port
from fakes.upstream import serve_upstream

pytestmark = pytest.mark.slow


class _Engine:
    """A scripted upstream served from its own thread and event loop (the replicas are
    processes; the tests' own loops come and go)."""

    def __enter__(self) -> _Engine:
        ready, self._stop = threading.Event(), None
        self._loop = asyncio.new_event_loop()

        async def main() -> None:
            self._stop = asyncio.Event()
            async with serve_upstream(["ok"], reply="first answer") as up:
                self.up = up
                ready.set()
                await self._stop.wait()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(main(),))
        self._thread.start()
        assert ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture(scope="module")
def fleet(redis_server, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cache")
    with _Engine() as engine:
        config = fleet_config(folder, redis_server.url,
                              [{"id": "e1", "base_url": engine.up.base_url}],
                              gate={"kind": "semantic"},
                              cache={"enabled": True, "share_interval_s": 0.05})
        for tenant in ("tenant-a", "tenant-b"):
            subprocess.run([sys.executable, "-m", "llmroute.cli.main", "tenants", "create",
                            tenant, "--config", str(config)], env=ENV, check=True,
                           capture_output=True, timeout=60)
        replicas = [Replica(config, free_port()), Replica(config, free_port())]
        try:
            for r in replicas:
                r.wait_ready(timeout_s=240)
            keys = {t: _key(replicas[0].url, t) for t in ("tenant-a", "tenant-b")}
            yield engine.up, replicas, keys
        finally:
            for r in replicas:
                r.stop()


def _key(url: str, tenant: str) -> str:
    answer = httpx.post(url + "/admin/keys", json={"tenant": tenant},
                        headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=30)
    assert answer.status_code == 201, answer.text
    return answer.json()["key"]


def _sdk(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


async def _ask(sdk: openai.AsyncOpenAI, text: str, **extra: object) -> tuple[str, str]:
    raw = await sdk.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": text}], **extra)
    return raw.headers["x-llmroute-cache"], raw.parse().choices[0].message.content


async def _stream(sdk: openai.AsyncOpenAI, text: str) -> tuple[str, str, object]:
    raw = await sdk.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": text}], stream=True,
        stream_options={"include_usage": True})
    pieces, usage = [], None
    async for chunk in raw.parse():
        if chunk.usage is not None:
            usage = chunk.usage
        pieces += [c.delta.content or "" for c in chunk.choices]
    return raw.headers["x-llmroute-cache"], "".join(pieces), usage


async def test_repeats_paraphrases_tenants_replicas_and_purge(fleet):
    up, (one, two), keys = fleet
    a, b = _sdk(one.url, keys["tenant-a"]), _sdk(one.url, keys["tenant-b"])
    up.reply = "Berlin is the capital of Germany."
    assert await _ask(a, "What is the capital of Germany?") == ("miss", up.reply)
    up.reply = "a fresh answer"
    assert await _ask(a, "What is the capital of Germany?") == (
        "hit-exact", "Berlin is the capital of Germany.")
    result, text, usage = await _stream(a, "What is the capital of Germany?")
    assert (result, text) == ("hit-exact", "Berlin is the capital of Germany.")
    assert usage is not None and usage.total_tokens == 0
    assert await _ask(a, "What is the capital city of Germany?") == (
        "hit-semantic", "Berlin is the capital of Germany.")
    assert await _ask(a, "What is the capital of France?") == ("miss", "a fresh answer")
    assert await _ask(b, "What is the capital of Germany?") == ("miss", "a fresh answer")
    await asyncio.sleep(0.5)  # the replicas exchange every 50 ms
    other = _sdk(two.url, keys["tenant-a"])
    assert await _ask(other, "What is the capital of Germany?") == (
        "hit-exact", "Berlin is the capital of Germany.")
    assert await _ask(other, "What is the capital of Germany?", extra_headers={
        "cache-control": "no-cache"}) == ("bypass", "a fresh answer")


async def test_a_stream_is_stored_when_it_ends_and_replayed(fleet):
    up, (one, _), keys = fleet
    sdk = _sdk(one.url, keys["tenant-a"])
    up.reply = "Streams are stored whole."
    first = await _stream(sdk, "Explain in one line what an SSE stream is.")
    up.reply = "something else"
    again = await _stream(sdk, "Explain in one line what an SSE stream is.")
    assert first[:2] == ("miss", "Streams are stored whole.")
    assert again[:2] == ("hit-exact", "Streams are stored whole.")
    assert again[2].total_tokens == 0 and first[2].total_tokens > 0


async def test_the_purge_needs_an_operator_and_reaches_every_replica(fleet):
    up, (one, two), keys = fleet
    sdk = _sdk(one.url, keys["tenant-b"])
    up.reply = "kept until purged"
    await _ask(sdk, "Name three primary colours.")
    assert (await _ask(sdk, "Name three primary colours."))[0] == "hit-exact"
    async with httpx.AsyncClient(timeout=30) as http:
        refused = await http.post(one.url + "/admin/cache/purge", json={"all": True},
                                  headers={"authorization": f"Bearer {keys['tenant-b']}"})
        empty = await http.post(one.url + "/admin/cache/purge", json={},
                                headers={"authorization": f"Bearer {ADMIN_KEY}"})
        done = await http.post(two.url + "/admin/cache/purge", json={"tenant": "tenant-b"},
                               headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert refused.status_code == 403 and empty.status_code == 400
    assert done.status_code == 200 and done.json()["shared"] is True
    deadline = time.monotonic() + 5
    up.reply = "after the purge"
    while (found := await _ask(sdk, "Name three primary colours.")) != ("miss",
                                                                        "after the purge"):
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.1)
