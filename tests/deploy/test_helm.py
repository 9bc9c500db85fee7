"""deploy/helm/llmroute lints and renders offline with Helm's own Go SDK (the
``helm-python-sdk`` wheel carries it; no helm binary), every object validates against the
Kubernetes JSON schemas, and the default render is the kustomize base's objects: the same
router container, probes, termination, config and strategies."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from deploy.manifests import kubectl_problem, render_all, Render

from llmroute.config import parse_config

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed "
                           "(pip install -e '.[test]')")

pytestmark = pytest.mark.slow

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "llmroute"
VARIANTS = {"default": {},
            "bundled-redis": {"redis": {"bundled": True}, "serviceMonitor": {"enabled": True}},
            "managed-redis": {"redis": {"url": "rediss://cache.example:6380/0"},
                              "autoscaling": {"enabled": False}, "replicas": 3,
                              "existingAdminSecret": "my-admin"}}


def render(values: dict) -> list[dict]:
    with helm.Chart.load(str(CHART)) as chart:
        files = chart.render(values, name="llmroute", namespace="default")
    return [d for text in files.values() for d in yaml.safe_load_all(text) if d]


def find(objects: list[dict], kind: str, name: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def router_config(objects: list[dict]) -> dict:
    return yaml.safe_load(find(objects, "ConfigMap", "llmroute-config")["data"]["config.yaml"])


def test_the_chart_lints_without_errors():
    report = helm.lint(str(CHART))
    assert report["errors"] == []
    assert not [m for m in report["messages"] if m["severity"] > 1], report["messages"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_rendered_object_validates_and_the_config_parses(variant):
    objects = render(VARIANTS[variant])
    problems = []
    for obj in objects:
        if obj["kind"] == "ServiceMonitor":
            continue  # a prometheus-operator CRD
        for version in ("1.27.0", "1.37.0"):
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {err.message}")
    assert not problems, "\n".join(problems)
    text = find(objects, "ConfigMap", "llmroute-config")["data"]["config.yaml"]
    parse_config(text, "llmroute-config/config.yaml")


def test_redis_is_state_only_when_asked_and_the_replica_count_follows_the_values():
    default, bundled, managed = (render(v) for v in VARIANTS.values())
    assert "state" not in router_config(default)
    assert router_config(bundled)["state"] == {"kind": "redis",
                                               "url": "redis://llmroute-redis:6379/0"}
    assert find(bundled, "Service", "llmroute-redis")["spec"]["ports"][0]["port"] == 6379
    assert router_config(managed)["state"]["url"] == "rediss://cache.example:6380/0"
    assert not [o for o in managed if o["kind"] in ("HorizontalPodAutoscaler", "Secret")]
    deployment = find(managed, "Deployment", "llmroute")
    assert deployment["spec"]["replicas"] == 3
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0]["valueFrom"]["secretKeyRef"]["name"] == "my-admin"
    checksums = {find(r, "Deployment", "llmroute")["spec"]["template"]["metadata"]
                 ["annotations"]["checksum/config"] for r in (default, bundled, managed)}
    assert len(checksums) == 3  # a config change rolls the pods


def test_the_default_render_matches_the_kustomize_base(tmp_path):
    problem = kubectl_problem()
    if problem:
        pytest.skip(problem)
    base = Render(render_all(tmp_path)["base"])
    chart = render({})
    assert router_config(chart) == yaml.safe_load(
        base.configmap("llmroute-config")["data"]["config.yaml"])
    assert find(chart, "ConfigMap", "llmroute-strategies")["data"] == \
        base.configmap("llmroute-strategies")["data"]
    ours = find(chart, "Deployment", "llmroute")["spec"]["template"]["spec"]
    theirs = base.router()["spec"]["template"]["spec"]
    for field in ("terminationGracePeriodSeconds", "securityContext"):
        assert ours[field] == theirs[field], field
    mine, kust = ours["containers"][0], theirs["containers"][0]
    for field in ("args", "ports", "startupProbe", "livenessProbe", "readinessProbe",
                  "lifecycle", "resources", "securityContext", "volumeMounts"):
        assert json.dumps(mine[field], sort_keys=True) == json.dumps(kust[field],
                                                                     sort_keys=True), field
    assert sorted(o["kind"] for o in chart) == sorted(o["kind"] for o in base.objects)
