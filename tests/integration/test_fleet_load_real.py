"""Fleet-wide in-flight counts, proved with real processes: three ``llmroute serve``
replicas (one client lane each) route with ``least-in-flight`` to two scripted engines,
``slow`` (0.3 s per answer, listed first: it wins ties) and ``fast`` (0.1 s). One router
carrying all three lanes sees each request it has in flight and sends most of them to the
fast engine; three replicas that do not share their counts each see nothing in flight
whenever they pick, tie, and all herd onto ``slow``; sharing them through Redis
(``state.share_load``, the default) brings the split back near one router's (measured
0.46–0.47 of the requests on the fast engine against one router's 0.59; 0.0 unshared)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.fakes.fleet import create_key, fleet_config, replicas
from tests.fakes.upstream import serve_upstream

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
LANES, SECONDS = 3, 4.0
pytestmark = pytest.mark.slow


async def _fast_share(tmp_path, url: str, n: int, share: bool) -> float:
    """The fraction of requests the fast engine served: ``LANES`` closed-loop lanes for
    ``SECONDS``, lane i to replica i mod ``n``."""
    async with serve_upstream([("hang", 0.3)]) as slow, \
            serve_upstream([("hang", 0.1)]) as fast:
        folder = tmp_path / f"{n}-{share}"
        folder.mkdir()
        config = fleet_config(folder, url, [{"id": "slow", "base_url": slow.base_url},
                                            {"id": "fast", "base_url": fast.base_url}],
                              anchor={"preset": "least-in-flight"},
                              state={"share_load": share})
        key = create_key(config)
        headers = {"authorization": f"Bearer {key}"}
        async with replicas(config, n) as started, httpx.AsyncClient(timeout=30) as client:
            await asyncio.sleep(0.3)  # every replica has published once
            slow.requests.clear()
            fast.requests.clear()
            until = time.monotonic() + SECONDS

            async def lane(i: int) -> None:
                while time.monotonic() < until:
                    r = await client.post(started[i % n].url + "/v1/chat/completions",
                                          json=CHAT, headers=headers)
                    assert r.status_code == 200, r.text

            await asyncio.gather(*[lane(i) for i in range(LANES)])
        return len(fast.requests) / (len(fast.requests) + len(slow.requests))


async def test_three_replicas_split_load_as_one_router_does(tmp_path, redis_server):
    one = await _fast_share(tmp_path, redis_server.url, 1, True)
    apart = await _fast_share(tmp_path, redis_server.url, 3, False)
    shared = await _fast_share(tmp_path, redis_server.url, 3, True)
    split = {"one": one, "apart": apart, "shared": shared}
    print(f"fast engine's share of requests: {split}")
    assert one > 0.4, split  # one router favours the fast engine (ideal: 0.6; a herd: 0)
    assert apart < 0.2, split  # replicas blind to each other herd onto the tie winner
    assert abs(shared - one) <= 0.2, split  # measured: 0.46-0.47 against 0.59
