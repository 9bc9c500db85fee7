"""deploy/kubernetes renders with ``kubectl kustomize`` and every object validates offline
against the Kubernetes JSON schemas (``kubernetes-validate``); then what schemas cannot see:
probes, drain timing, the router config and strategies parsed by llmroute itself, the admin
key kept in its Secret, the non-root read-only pod, and the objects pointing at each other."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from deploy.manifests import MONITORED, Render, kubectl_problem, render_all

from llmroute.cli.strategy import load_strategies
from llmroute.config import Config, parse_config

pytestmark = pytest.mark.slow  # runs kubectl (about a second)

K8S_VERSIONS = ("1.27.0", "1.37.0")
"""The oldest Kubernetes the manifests are meant for, and the newest the schemas know."""
DRAIN_DEFAULTS = {"drain_delay_s": 5.0, "drain_timeout_s": 30.0}
"""``server.drain_*`` defaults, for a checkout whose ServerConfig predates them."""
PLAIN = ("base", "single-replica", "with-redis")


@pytest.fixture(scope="module")
def renders(tmp_path_factory) -> dict[str, Render]:
    problem = kubectl_problem()
    if problem:
        pytest.skip(problem)
    rendered = render_all(tmp_path_factory.mktemp("monitored"))
    return {name: Render(objects) for name, objects in rendered.items()}


def router_config(render: Render) -> Config:
    text = render.configmap("llmroute-config")["data"]["config.yaml"]
    if "state" in yaml.safe_load(text) and "state" not in Config.model_fields:
        pytest.skip("state.kind redis arrives with the Redis state backend")
    return parse_config(text, "llmroute-config/config.yaml")


def test_every_object_validates_against_the_kubernetes_schemas(renders):
    unique = {json.dumps(o, sort_keys=True): o for r in renders.values() for o in r.objects}
    problems = []
    for obj in unique.values():
        if obj["kind"] == "ServiceMonitor":
            continue  # a prometheus-operator CRD: test_servicemonitor_scrapes_the_router
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                problems.append(f"{obj['kind']}/{obj['metadata']['name']} @{version}: "
                                f"{err.message}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("variant", PLAIN)
def test_probes_hit_ready_and_health_on_the_served_port(renders, variant):
    render = renders[variant]
    c, cfg = render.container(), router_config(render)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == cfg.server.port and f"--port={cfg.server.port}" in c["args"]
    assert cfg.server.host == "0.0.0.0" and "--host=0.0.0.0" in c["args"]
    paths = {probe: (c[probe]["httpGet"]["path"], ports[c[probe]["httpGet"]["port"]])
             for probe in ("readinessProbe", "livenessProbe", "startupProbe")}
    assert paths == {"readinessProbe": ("/ready", cfg.server.port),
                     "livenessProbe": ("/health", cfg.server.port),
                     "startupProbe": ("/health", cfg.server.port)}
    service = render.one("Service", "llmroute")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


@pytest.mark.parametrize("variant", PLAIN)
def test_grace_period_outlasts_prestop_and_the_routers_drain(renders, variant):
    render = renders[variant]
    server = router_config(render).server
    drain = sum(getattr(server, name, default) for name, default in DRAIN_DEFAULTS.items())
    command = render.container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    grace = render.router()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > float(command[1]) + drain + 5  # 5 s for the process to exit


@pytest.mark.parametrize("variant", PLAIN)
def test_router_config_and_strategies_parse_with_llmroute(renders, variant, tmp_path):
    render = renders[variant]
    cfg = router_config(render)
    config_map = render.configmap("llmroute-config")["metadata"]["name"]
    config_path = f"{render.mount_of('configMap', config_map)}/config.yaml"
    assert render.container()["args"][:2] == ["serve", f"--config={config_path}"]
    strategies = render.configmap("llmroute-strategies")
    assert cfg.strategies is not None
    assert cfg.strategies.dir == render.mount_of("configMap", "llmroute-strategies")
    for name, text in strategies["data"].items():
        (tmp_path / name).write_text(text)
    loaded = load_strategies(cfg, tmp_path)
    assert len(loaded.entries) == len(strategies["data"]) >= 1


def test_redis_overlay_adds_state_and_changes_nothing_else(renders):
    base = yaml.safe_load(renders["base"].configmap("llmroute-config")["data"]["config.yaml"])
    redis = yaml.safe_load(
        renders["with-redis"].configmap("llmroute-config")["data"]["config.yaml"])
    state = redis.pop("state")
    assert redis == base
    assert state["kind"] == "redis"
    url = urlsplit(state["url"])
    service = renders["with-redis"].one("Service", url.hostname)
    assert [p["port"] for p in service["spec"]["ports"]] == [url.port]
    assert "state" not in base and not renders["single-replica"].all("HorizontalPodAutoscaler")
    router_config(renders["with-redis"])  # parses (once the state backend is in)


@pytest.mark.parametrize("variant", PLAIN)
def test_admin_key_comes_from_the_secret_and_nowhere_else(renders, variant):
    render = renders[variant]
    cfg = router_config(render)
    assert cfg.auth.enabled
    env = {e["name"]: e for e in render.container()["env"]}
    ref = env[cfg.auth.admin_key_env]["valueFrom"]["secretKeyRef"]
    secret = render.one("Secret", ref["name"])
    key = secret["stringData"][ref["key"]]
    assert len(key) >= 16
    maps = json.dumps([o for o in render.all("ConfigMap")])
    assert key not in maps
    assert not [e for e in env.values() if key in str(e.get("value", ""))]


@pytest.mark.parametrize("variant", PLAIN)
def test_router_runs_non_root_on_a_read_only_root(renders, variant):
    render = renders[variant]
    pod = render.router()["spec"]["template"]["spec"]
    c = render.container()
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] > 0
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    scratch = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    writable = [m["mountPath"] for m in c["volumeMounts"] if m["name"] in scratch]
    env = {e["name"]: e.get("value") for e in c["env"]}
    cfg = router_config(render)
    needed = [env["LLMROUTE_CACHE"], env["HF_HOME"], env["TMPDIR"], c["workingDir"],
              str(Path(cfg.auth.keys_path).parent)]
    assert all(any(Path(p).is_relative_to(w) for w in writable) for p in needed), needed
    assert {"cpu", "memory"} <= c["resources"]["requests"].keys()
    assert "memory" in c["resources"]["limits"]


def test_every_reference_names_a_rendered_object(renders):
    for name, render in renders.items():
        names = {(o["kind"], o["metadata"]["name"]) for o in render.objects}
        for deploy in render.all("Deployment"):
            pod = deploy["spec"]["template"]["spec"]
            for vol in pod["volumes"]:
                for kind in ("configMap", "secret"):
                    if kind in vol:
                        ref = vol[kind].get("name") or vol[kind]["secretName"]
                        assert (kind[0].upper() + kind[1:], ref) in names, (name, ref)
            sa = pod.get("serviceAccountName")
            assert sa is None or ("ServiceAccount", sa) in names


@pytest.mark.parametrize("variant", ("base", "with-redis"))
def test_autoscaler_budget_and_service_select_the_router(renders, variant):
    render = renders[variant]
    deploy = render.router()
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert "replicas" not in deploy["spec"]  # the autoscaler owns the count
    hpa = render.one("HorizontalPodAutoscaler", "llmroute")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": "llmroute"}
    assert 2 <= hpa["minReplicas"] < hpa["maxReplicas"]
    pdb = render.one("PodDisruptionBudget", "llmroute")["spec"]["selector"]["matchLabels"]
    service = render.one("Service", "llmroute")["spec"]["selector"]
    assert pdb.items() <= labels.items() and service.items() <= labels.items()


def test_single_replica_runs_one_router_without_autoscaler_or_budget(renders):
    render = renders["single-replica"]
    assert render.router()["spec"]["replicas"] == 1
    assert not render.all("HorizontalPodAutoscaler") and not render.all("PodDisruptionBudget")
    assert router_config(render).model_dump().get("state", {"kind": "memory"})["kind"] == "memory"


def test_discovery_role_reads_endpointslices_only(renders):
    render = renders["with-redis"]
    role = render.one("Role", "llmroute-discovery")
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["get", "list", "watch"]}]
    binding = render.one("RoleBinding", "llmroute-discovery")
    assert binding["roleRef"]["name"] == "llmroute-discovery"
    sa = render.router()["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa,
                                    "namespace": "llmroute"}]


def test_servicemonitor_scrapes_the_router(renders):
    render = renders[MONITORED]
    monitor = render.one("ServiceMonitor", "llmroute")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = render.one("Service", "llmroute")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    redis = render.one("Service", "llmroute-redis")["metadata"]["labels"]
    assert not selector.items() <= redis.items()
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]] == [("http", "/metrics")]
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= port_names
    assert router_config(render).auth.metrics_open  # no key needed to scrape


@pytest.mark.parametrize("variant", PLAIN)
def test_pod_annotations_let_plain_prometheus_scrape(renders, variant):
    render = renders[variant]
    notes = render.router()["spec"]["template"]["metadata"]["annotations"]
    port = router_config(render).server.port
    assert notes == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                     "prometheus.io/path": "/metrics"}


@pytest.mark.parametrize("mutate", [
    lambda pod: pod["containers"][0]["readinessProbe"]["httpGet"].update(pathh="/ready"),
    lambda pod: pod.update(terminationGracePeriodSeconds="fifty"),
    lambda pod: pod["containers"][0].pop("name"),
], ids=["unknown-field", "wrong-type", "missing-required"])
def test_the_schema_check_catches_a_broken_deployment(renders, mutate):
    broken = json.loads(json.dumps(renders["base"].router()))
    mutate(broken["spec"]["template"]["spec"])
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)
