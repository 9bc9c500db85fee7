"""A fake Kubernetes API server on loopback answering the EndpointSlice list call
(``GET /apis/discovery.k8s.io/v1/namespaces/<ns>/endpointslices?labelSelector=…``) with
real EndpointSlice JSON, and a kubeconfig file pointing at it (bearer token auth)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

TOKEN = "fake-token"


@dataclass
class FakeKube:
    """The server's state: ``slices`` (EndpointSlice objects, any namespace), ``status``
    (200, or e.g. 403 to refuse), the ``requests`` seen (``path?labelSelector``), ``kubeconfig``."""

    slices: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    requests: list[str] = field(default_factory=list)
    kubeconfig: Path = Path()
    url: str = ""


KUBE = web.AppKey("kube", FakeKube)


def endpoint_slice(name: str, service: str, port: int, addresses: list[str], *,
                   namespace: str = "llm", ready: bool = True,
                   port_name: str = "http") -> dict[str, Any]:
    """One EndpointSlice of ``service`` as the API server returns it."""
    return {
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1",
                     "labels": {"kubernetes.io/service-name": service,
                                "endpointslice.kubernetes.io/managed-by":
                                    "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [a], "conditions": {"ready": ready, "serving": ready,
                                                        "terminating": False},
                       "nodeName": "node-1", "targetRef": {"kind": "Pod", "name": f"{name}-{i}",
                                                           "namespace": namespace}}
                      for i, a in enumerate(addresses)],
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}]}


def _forbidden(namespace: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": 'endpointslices.discovery.k8s.io is forbidden: User '
                       '"system:serviceaccount:llm:default" cannot list resource '
                       f'"endpointslices" in API group "discovery.k8s.io" in the namespace '
                       f'"{namespace}"',
            "reason": "Forbidden", "details": {"group": "discovery.k8s.io",
                                               "kind": "endpointslices"}, "code": 403}


async def _list(request: web.Request) -> web.Response:
    kube: FakeKube = request.app[KUBE]
    kube.requests.append(f"{request.path}?{request.query.get('labelSelector', '')}")
    namespace = request.match_info["ns"]
    if request.headers.get("authorization") != f"Bearer {TOKEN}":
        return web.json_response({"kind": "Status", "code": 401}, status=401)
    if kube.status != 200:
        return web.json_response(_forbidden(namespace), status=kube.status)
    key, _, value = request.query.get("labelSelector", "").partition("=")
    items = [s for s in kube.slices if s["metadata"]["namespace"] == namespace
             and s["metadata"]["labels"].get(key) == value]
    return web.json_response({"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
                              "metadata": {"resourceVersion": "1"}, "items": items})


@contextlib.asynccontextmanager
async def serve_kube(folder: Path) -> AsyncIterator[FakeKube]:
    """Serve the fake API on 127.0.0.1 (a free port); its kubeconfig is written in
    ``folder``."""
    kube = FakeKube()
    app = web.Application()
    app[KUBE] = kube
    app.router.add_get("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", _list)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    kube.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    kube.kubeconfig = folder / "kubeconfig"
    kube.kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: fake, cluster: {{server: \"{kube.url}\"}}}}]\n"
        f"users: [{{name: router, user: {{token: {TOKEN}}}}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: router}}]\n"
        "current-context: fake\n")
    try:
        yield kube
    finally:
        await runner.cleanup()
