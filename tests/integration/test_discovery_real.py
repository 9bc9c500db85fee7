"""Engine discovery (``assemble/discovery.py``) with real HTTP on loopback: a real uvicorn
router, scripted upstreams, a fake Kubernetes API server answering real EndpointSlice
JSON, and a DNS name (``localhost``) the system resolver answers. Endpoints that appear
join after a health check; vanishing ones are drained with no failed request under load;
a failing source (403) keeps the old set; an empty answer is believed after its grace."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from llmroute.assemble.discovery import Discoverer, discovering
from llmroute.assemble.generations import Generations
from llmroute.assemble.reload import Reloader
from llmroute.assemble.runtime import open_runtime
from llmroute.config import load_config
from tests.fakes.kubernetes import endpoint_slice, serve_kube
from tests.fakes.upstream import serve_upstream
from tests.integration.test_reload_real import _load, _one

FAST = "interval_s: 0.1, health_timeout_s: 1.0"


def write_config(path: Path, discovery: str, backends: str = "") -> None:
    """A config of pool ``p`` whose backends come from one ``discovery`` entry (YAML flow
    mapping) and the optional static ``backends`` rows (of pool ``q``)."""
    static, pools = (f"backends:\n{backends}", "p: {}, q: {}") if backends else ("", "p: {}")
    path.write_text(f"gate: {{kind: off}}\npools: {{{pools}}}\n{static}"
                    f"discovery:\n  - {discovery}\nrouting: {{default_pool: p}}\n")


@contextlib.asynccontextmanager
async def served(path: Path) -> AsyncIterator[tuple[str, Reloader, list[Discoverer]]]:
    """The router of ``path`` on a loopback port, discovering."""
    config = load_config(path)
    gens = Generations()
    async with open_runtime(config, None, gens) as rt:
        app = create_app(config, runtime=rt)
        app.reloader = reloader = Reloader(app, None, gens, drain_timeout_s=10.0)
        async with discovering(reloader, config.discovery, rt.metrics.registry) as found, \
                serve_in_background(app) as url:
            yield url, reloader, found


def kube_entry(kubeconfig: Path, **extra: Any) -> str:
    more = "".join(f", {k}: {v}" for k, v in extra.items())
    return ("{id_prefix: vllm, pool: p, engine: vllm, model: m, " + FAST + more +
            ", source: {kubernetes: {namespace: llm, service: vllm, port_name: http, "
            f"kubeconfig: \"{kubeconfig}\"}}}}}}")


def ids(reloader: Reloader) -> list[str]:
    return sorted(reloader.target.state.runtime.backends)


async def until(check: Any, timeout_s: float = 5.0) -> None:
    async def wait() -> None:
        while not check():
            await asyncio.sleep(0.02)
    await asyncio.wait_for(wait(), timeout_s)


async def test_kubernetes_endpoints_join_and_drain_under_load(tmp_path):
    path = tmp_path / "llmroute.yaml"
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b, \
            serve_kube(tmp_path) as kube:
        port_a, port_b = (int(u.base_url.rsplit(":", 1)[1]) for u in (a, b))
        kube.slices = [endpoint_slice("vllm-a", "vllm", port_a, ["127.0.0.1"]),
                       endpoint_slice("other", "other", port_b, ["127.0.0.1"])]
        write_config(path, kube_entry(kube.kubeconfig))
        async with served(path) as (url, reloader, _), httpx.AsyncClient(timeout=10) as client:
            assert ids(reloader) == [f"vllm-127.0.0.1-{port_a}"]  # the first refresh ran
            stop, failed, done = asyncio.Event(), [], []
            load = [asyncio.create_task(_load(client, url, i % 2 == 0, stop, failed, done))
                    for i in range(4)]
            await asyncio.sleep(0.3)
            kube.slices.append(endpoint_slice("vllm-b", "vllm", port_b, ["127.0.0.1"]))
            await until(lambda: len(b.requests) > 3)
            kube.slices = [s for s in kube.slices if s["metadata"]["name"] != "vllm-a"]
            await until(lambda: ids(reloader) == [f"vllm-127.0.0.1-{port_b}"])
            await until(lambda: not reloader.draining)  # a's last requests have ended
            on_a, on_b = len(a.requests), len(b.requests)
            await until(lambda: len(b.requests) >= on_b + 10)
            stop.set()
            await asyncio.gather(*load)
            metrics = (await client.get(url + "/metrics")).text
    assert failed == [] and len(done) > 20
    assert len(a.requests) == on_a  # drained: nothing new reaches the vanished endpoint
    assert 'llmroute_discovered_endpoints{discovery="vllm",source="kubernetes"} 1.0' in metrics
    assert set(kube.requests) == {"/apis/discovery.k8s.io/v1/namespaces/llm/endpointslices"
                                  "?kubernetes.io/service-name=vllm"}


async def test_a_403_keeps_the_old_set_and_is_counted(tmp_path):
    path = tmp_path / "llmroute.yaml"
    async with serve_upstream(["ok"] * 20) as a, serve_kube(tmp_path) as kube:
        port = int(a.base_url.rsplit(":", 1)[1])
        kube.slices = [endpoint_slice("vllm-a", "vllm", port, ["127.0.0.1"])]
        write_config(path, kube_entry(kube.kubeconfig))
        async with served(path) as (url, reloader, (found,)), \
                httpx.AsyncClient(timeout=10) as client:
            kube.status = 403
            seen = len(kube.requests)
            await until(lambda: len(kube.requests) >= seen + 3)
            assert found.failing and ids(reloader) == [f"vllm-127.0.0.1-{port}"]
            assert await _one(client, url, False)
            metrics = (await client.get(url + "/metrics")).text
            kube.status = 200
            await until(lambda: not found.failing)
    assert ('llmroute_discovery_refresh_failures_total{discovery="vllm",reason="forbidden",'
            'source="kubernetes"}') in metrics
    assert len(a.requests) == 1


async def test_not_ready_and_unhealthy_endpoints_wait_and_an_empty_answer_drains_after_grace(
        tmp_path):
    path = tmp_path / "llmroute.yaml"
    async with serve_upstream(["ok"] * 20) as a, serve_upstream(["ok"] * 20) as b, \
            serve_kube(tmp_path) as kube:
        port_a, port_b = (int(u.base_url.rsplit(":", 1)[1]) for u in (a, b))
        b.healthy = False
        kube.slices = [endpoint_slice("vllm-a", "vllm", port_a, ["127.0.0.1"]),
                       endpoint_slice("vllm-b", "vllm", port_b, ["127.0.0.1"]),
                       endpoint_slice("vllm-c", "vllm", 9, ["127.0.0.1"], ready=False)]
        write_config(path, kube_entry(kube.kubeconfig, empty_grace_s=1.5,
                                      health_timeout_s=0.2))
        async with served(path) as (url, reloader, _), httpx.AsyncClient(timeout=10) as client:
            assert ids(reloader) == [f"vllm-127.0.0.1-{port_a}"]
            b.healthy = True
            await until(lambda: len(ids(reloader)) == 2)
            kube.slices = []
            await asyncio.sleep(0.3)
            kept = ids(reloader)
            await until(lambda: ids(reloader) == [], timeout_s=5.0)
            empty = await client.post(url + "/v1/chat/completions",
                                      json={"model": "auto",
                                            "messages": [{"role": "user", "content": "hi"}]})
    assert kept == sorted([f"vllm-127.0.0.1-{port_a}", f"vllm-127.0.0.1-{port_b}"])
    assert empty.status_code == 503


async def test_a_dns_name_joins_and_a_re_resolution_is_unchanged(tmp_path):
    path = tmp_path / "llmroute.yaml"
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as static:
        port = int(a.base_url.rsplit(":", 1)[1])
        entry = ("{id_prefix: llm, pool: p, engine: openai, model: m, port: " f"{port}, "
                 + FAST + ", source: {dns: {name: localhost, type: A}}}")
        write_config(path, entry, f"  - {{id: s, pool: q, engine: openai, model: m, "
                                  f"base_url: \"{static.base_url}\"}}\n")
        async with served(path) as (url, reloader, (found,)), \
                httpx.AsyncClient(timeout=10) as client:
            assert ids(reloader) == [f"llm-127.0.0.1-{port}", "s"]
            again = await found.refresh()
            file_reload = await reloader.reload()
            answers = [await _one(client, url, False) for _ in range(4)]
    assert again is not None and not again.applied
    assert not file_reload.applied and file_reload.kept == ("s", f"llm-127.0.0.1-{port}")
    assert all(answers) and len(a.requests) == 4 and static.requests == []
