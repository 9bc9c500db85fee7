"""Cost routing through ``llmroute serve`` over real HTTP on loopback, scripted upstreams for
a cheap and a dear pool: the gate's win head (fitted at start on the test outcome file) sends
an easy prompt to the cheap pool and a hard one to the dear pool (``x-llmroute-pool``,
``/debug/route``); each request's cost is on ``/metrics``, the trace and the audit record;
as the key's daily cost budget runs down a ``budget_left_below`` strategy moves it to the
cheap pool, and once it is spent the next request gets OpenAI's ``insufficient_quota`` 429."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import httpx
import pytest
import yaml

from tests.fakes.fleet import ADMIN_KEY, Replica, create_key
from tests.fakes.redis import free_port
from tests.fakes.upstream import serve_upstream

pytestmark = pytest.mark.slow
DATA = Path(__file__).resolve().parents[1] / "data" / "router_outcomes.jsonl"
PRICES = {"small": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
          "large": {"input_per_mtok": 10.0, "output_per_mtok": 30.0}}
SMALL, LARGE = (5 * 1.0 + 5 * 2.0) / 1e6, (5 * 10.0 + 5 * 30.0) / 1e6  # 5 + 5 tokens each
CLIMB = ("strategy_id: climb\nversion: 1\nkind: cascade\npools: [small, large]\n"
         "escalate: {win_probability_at_least: 0.5}\n")
SAVER = ("strategy_id: saver\nversion: 1\npriority: 5\nkind: single\npool: small\n"
         "when: {budget_left_below: 0.5}\n")
EASY = "What is 14 plus 3?"
HARD = ("Prove that there are infinitely many primes p such that p + 4 is also prime, or "
        "explain why this is open, step by step.")


def _config(tmp: Path, small: str, large: str) -> Path:
    folder = tmp / "strategies"
    folder.mkdir()
    (folder / "climb.yaml").write_text(CLIMB)
    (folder / "saver.yaml").write_text(SAVER)
    data = {"server": {"drain_delay_s": 0.0, "drain_timeout_s": 5},
            "pools": {p: {"price": v} for p, v in PRICES.items()},
            "backends": [{"id": "s1", "pool": "small", "engine": "openai", "model": "m",
                          "base_url": small},
                         {"id": "l1", "pool": "large", "engine": "openai", "model": "m",
                          "base_url": large}],
            "routing": {"default_pool": "small"},
            "gate": {"encoder": False, "router": {"data": str(DATA),
                                                  "pools": ["small", "large"]}},
            "strategies": {"dir": str(folder), "watch": False},
            "auth": {"enabled": True, "keys_path": str(tmp / "keys.sqlite3")},
            "observe": {"audit": {"path": str(tmp / "audit.sqlite3")}}}
    path = tmp / "router.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _chat(text: str) -> dict[str, object]:
    return {"model": "auto", "messages": [{"role": "user", "content": text}],
            "max_tokens": 16}


async def test_cost_aware_cascade_costs_and_budget_over_real_http(tmp_path: Path) -> None:
    async with serve_upstream(["ok"] * 40, "cheap answer") as small, \
            serve_upstream(["ok"] * 40, "dear answer") as large:
        config = _config(tmp_path, small.base_url, large.base_url)
        secret = await asyncio.to_thread(create_key, config, "--daily-cost",
                                         repr(SMALL + 2 * LARGE + 3 * SMALL / 2))
        replica = Replica(config, free_port())
        try:
            await asyncio.to_thread(replica.wait_ready, 180.0)
            admin = {"authorization": f"Bearer {ADMIN_KEY}"}
            user = {"authorization": f"Bearer {secret}"}
            async with httpx.AsyncClient(base_url=replica.url, timeout=30) as client:
                route = await _debug_route(client, admin)
                answers = []
                for text in (EASY, HARD, HARD, HARD, HARD, HARD):
                    answers.append(await client.post("/v1/chat/completions",
                                                     json=_chat(text), headers=user))
                trace = (await client.get(f"/trace/{answers[1].headers['x-request-id']}",
                                          headers=admin)).json()
                metrics = (await client.get("/metrics", headers=admin)).text
        finally:
            assert replica.stop() == 0, replica.log_text()
    assert route["detail"]["start"] == "large" and route["intent"]["wins"][0]["pool"] == "small"
    assert route["intent"]["wins"][0]["probability"] < 0.5
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 200, 429], replica.log_text()
    pools = [a.headers.get("x-llmroute-pool") for a in answers[:5]]
    assert pools == ["small", "large", "large", "small", "small"]
    assert [a.headers.get("x-llmroute-strategy") for a in answers[:5]] == [
        "climb@1", "climb@1", "climb@1", "saver@1", "saver@1"]
    assert answers[5].json()["error"]["code"] == "insufficient_quota"
    assert trace["cost"] == pytest.approx(LARGE) and trace["cost_by_pool"] == {
        "large": pytest.approx(LARGE)}
    gate = next(s for s in trace["steps"] if s["step"] == "gate")
    assert gate["wins"][0][0] == "small" and gate["wins"][0][1] < 0.5
    costs = {line.split("pool=\"")[1].split("\"")[0]: float(line.rsplit(" ", 1)[1])
             for line in metrics.splitlines() if line.startswith("llmroute_cost_total{")}
    assert costs["small"] == pytest.approx(3 * SMALL) and costs["large"] == pytest.approx(
        2 * LARGE)
    with sqlite3.connect(tmp_path / "audit.sqlite3") as conn:
        records = [json.loads(r) for (r,) in conn.execute("SELECT record FROM audit")]
    audited = next(r for r in records if r.get("request_id") == trace["request_id"])
    assert audited["cost"] == pytest.approx(LARGE)


async def _debug_route(client: httpx.AsyncClient, admin: dict[str, str]) -> dict:
    """``/debug/route`` for the hard prompt, once the gate's head answers (it fits at start)."""
    for _ in range(300):
        r = await client.get("/debug/route", params={"query": HARD}, headers=admin)
        if r.status_code == 200 and r.json()["intent"].get("wins"):
            return r.json()
        await asyncio.sleep(0.2)
    raise AssertionError(f"the win head never answered: {r.status_code} {r.text[:300]}")
