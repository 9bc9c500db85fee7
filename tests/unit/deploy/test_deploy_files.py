"""The shipped Prometheus rules, scrape config and Grafana dashboard: ``promtool`` accepts
them and the alert rules fire as specified (``alerts_test.yml``), and every PromQL expression
names only series the router's ``/metrics`` really exposes after traffic with a handoff."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fakes.observed import observed_router, send_traffic

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
PROM, GRAFANA = DEPLOY / "prometheus", DEPLOY / "grafana" / "llmroute.json"
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",),
            "histogram": ("_bucket", "_count", "_sum", "_created")}
_CLAUSE = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"\b(?:llmroute|gen_ai)_[A-Za-z0-9_]+")


def metric_names(expr: str) -> set[str]:
    """The llmroute / GenAI metric names ``expr`` selects (not its label names)."""
    return set(_NAME.findall(re.sub(r"\{[^}]*\}", "", _CLAUSE.sub("", expr))))


def exposed(text: str) -> set[str]:
    """Every series name a Prometheus text exposition declares."""
    return {f.name + s for f in text_string_to_metric_families(text)
            for s in SUFFIXES.get(f.type, ("",))}


def grafana_exprs() -> list[str]:
    dash = json.loads(GRAFANA.read_text(encoding="utf-8"))
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def rule_exprs() -> list[str]:
    groups = yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]
    return [r["expr"] for g in groups for r in g["rules"]]


def promtool(*args: str) -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (make installs Debian's prometheus)")
    run = subprocess.run([tool, *args], cwd=PROM, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


@pytest.mark.parametrize("args", [("check", "rules", "alerts.yml"),
                                  ("check", "config", "prometheus.yml"),
                                  ("test", "rules", "alerts_test.yml")],
                         ids=["check-rules", "check-config", "rule-unit-tests"])
def test_promtool_accepts_the_rules_and_they_fire_as_specified(args):
    assert "SUCCESS" in promtool(*args)


def test_the_five_alerts_are_there():
    groups = yaml.safe_load((PROM / "alerts.yml").read_text())["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    assert set(alerts) == {"LLMRouteHighErrorRate", "LLMRouteLatencyAboveBaseline",
                           "LLMRouteHighMeltRate", "LLMRouteBackendDark", "LLMRoutePoolDark"}
    assert all(r["for"] == "5m" for r in alerts.values())


def test_the_grafana_dashboard_is_well_formed():
    dash = json.loads(GRAFANA.read_text(encoding="utf-8"))
    ids = [p["id"] for p in dash["panels"]]
    assert dash["uid"] == "llmroute" and len(ids) == len(set(ids))
    for panel in dash["panels"]:
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", panel
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for topic in ("requests", "first token", "tokens",
                  "kv-cache", "score", "melt rate", "breaker"):
        assert topic in titles, topic


def test_metric_names_skip_label_names():
    expr = ('sum by (gen_ai_token_type) (rate(gen_ai_client_token_usage_sum'
            '{gen_ai_token_type="x"}[5m]))')
    assert metric_names(expr) == {"gen_ai_client_token_usage_sum"}


async def test_every_expression_names_series_the_router_exposes():
    async with observed_router() as (_, url):
        assert await send_traffic(url)
        async with httpx.AsyncClient(base_url=url) as client:
            text = (await client.get("/metrics")).text
    names = exposed(text)
    for expr in grafana_exprs() + rule_exprs():
        used = metric_names(expr)
        assert used or expr.startswith("llmroute:"), expr
        assert used <= names, (expr, used - names)
