"""A real Prometheus (Debian's ``prometheus``) scrapes a running router every second and
answers PromQL over its HTTP API: llmroute's request and TTFT series are there, the shipped
alert rules load, and every Grafana panel's expression is valid PromQL with data behind the
request, latency, token, watermark, score and melt-rate panels. Skipped only when no
``prometheus`` binary can be found."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from fakes.observed import observed_router, send_traffic

pytestmark = pytest.mark.slow

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
FILLED = ("llmroute_requests_total", "gen_ai_server_time_to_first_token_seconds",
          "gen_ai_client_token_usage", "llmroute_backend_kv_cache_usage",
          "llmroute_backend_score", "llmroute_fuse_handoffs_total", "llmroute_breaker_state")


def prometheus_binary() -> str:
    found = shutil.which("prometheus") or next(
        (p for p in ("/usr/bin/prometheus", "/usr/local/bin/prometheus") if Path(p).exists()),
        None)
    if found is None:
        pytest.skip("no prometheus binary (make installs Debian's prometheus package)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Prometheus:
    """A running Prometheus: its base ``url``, process and log file."""

    url: str
    proc: asyncio.subprocess.Process
    log: Path

    async def query(self, expr: str) -> dict[str, Any]:
        """The answer of ``GET /api/v1/query`` for ``expr``, now."""
        async with httpx.AsyncClient(timeout=10) as client:
            return (await client.get(f"{self.url}/api/v1/query", params={"query": expr})).json()

    async def until(self, path: str, done: Callable[[httpx.Response], bool],
                    limit_s: float = 60) -> None:
        """Poll ``GET path`` until ``done(answer)``; fails with the log when it never is."""
        deadline = time.monotonic() + limit_s
        async with httpx.AsyncClient(timeout=10) as client:
            while time.monotonic() < deadline and self.proc.returncode is None:
                with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                    if done(await client.get(self.url + path)):
                        return
                await asyncio.sleep(0.5)
        pytest.fail(f"Prometheus: {path} never got there; its log:\n"
                    + self.log.read_text()[-3000:])


@contextlib.asynccontextmanager
async def prometheus(target: str, tmp: Path) -> AsyncIterator[Prometheus]:
    """Prometheus scraping ``target`` (host:port) every second, storing under ``tmp``."""
    config = tmp / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(DEPLOY / "prometheus" / "alerts.yml")],
        "scrape_configs": [{"job_name": "llmroute", "static_configs": [
            {"targets": [target]}]}]}))
    port, log_path = free_port(), tmp / "prometheus.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            prometheus_binary(), f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            stdout=log, stderr=log)
        prom = Prometheus(f"http://127.0.0.1:{port}", proc, log_path)
        try:
            await prom.until("/-/ready", lambda r: r.status_code == 200)
            yield prom
        finally:
            if proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 30)


EMPTY_HERE = ("llmroute_fuse_dead_ends_total", "llmroute_backend_gpu_temp_celsius",
              "llmroute_backend_net_rtt_seconds")
"""The dashboard's panels with nothing to show in this test (why: at the assertion)."""


def rules_in_file() -> int:
    """How many rules (alerts and recordings) ``deploy/prometheus/alerts.yml`` holds."""
    groups = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"]
    return sum(len(g["rules"]) for g in groups)


def panel_exprs() -> list[str]:
    dash = json.loads((DEPLOY / "grafana" / "llmroute.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    return [e.replace("$__rate_interval", "1m").replace('"$pool"', '".*"')
            .replace('"$backend"', '".*"') for e in exprs]


async def test_prometheus_scrapes_the_router_and_answers_promql(tmp_path):
    prometheus_binary()
    async with observed_router() as (_, router):
        assert await send_traffic(router)
        async with prometheus(router.removeprefix("http://"), tmp_path) as prom:
            await prom.until("/api/v1/query?query=llmroute_requests_total",
                             lambda r: bool(r.json()["data"]["result"]))
            await send_traffic(router, rounds=6)  # a later scrape sees the counters move
            await asyncio.sleep(2.5)
            results = {name: await prom.query(f'{{__name__=~"{name}.*"}}') for name in FILLED}
            exprs = {e: await prom.query(e) for e in panel_exprs()}
            rules = rules_in_file()
            await prom.until("/api/v1/rules", lambda r: sum(
                len(g["rules"]) for g in r.json()["data"]["groups"]) == rules)
    for name, answer in results.items():
        assert answer["status"] == "success" and answer["data"]["result"], name
    requests = results["llmroute_requests_total"]["data"]["result"]
    assert {r["metric"]["backend"] for r in requests} <= {"cutter", "steady"}, requests
    assert all(r["metric"]["job"] == "llmroute" for r in requests)
    ttft = {r["metric"]["__name__"] for r in results[FILLED[1]]["data"]["result"]}
    assert "gen_ai_server_time_to_first_token_seconds_bucket" in ttft
    for expr, answer in exprs.items():
        assert answer["status"] == "success", (expr, answer)
    empty = [e for e, a in exprs.items() if not a["data"]["result"]]
    # no stream died here, the scripted engines have no GPU page, and no engine metrics are
    # polled (the router's RTT is read on its polls): every other panel has data
    named = sorted(next((m for m in EMPTY_HERE if m in e), e) for e in empty)
    assert named == sorted(EMPTY_HERE), empty
