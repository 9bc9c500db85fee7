"""The Kubernetes EndpointSlice API as an endpoint source (``kubernetes-asyncio``): the
ready endpoints of one Service, read from its EndpointSlices (label
``kubernetes.io/service-name``). Credentials: the pod's service account when running in a
cluster (``KUBERNETES_SERVICE_HOST`` set, no ``kubeconfig`` given), else a kubeconfig
file. The Role needs ``list`` on ``endpointslices`` in ``discovery.k8s.io``
(deploy/kubernetes)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.config import ConfigException

from llmroute.config.discovery import KubernetesSourceConfig
from llmroute.discovery.protocol import Endpoint
from llmroute.errors import DiscoveryError

REQUEST_TIMEOUT_S = 5.0
"""Bound of one list call to the API server."""

SERVICE_LABEL = "kubernetes.io/service-name"
"""The label an EndpointSlice carries with the name of the Service it belongs to."""


class KubernetesSource:
    """The ready endpoints of ``config.service`` (module docstring)."""

    kind = "kubernetes"

    def __init__(self, config: KubernetesSourceConfig):
        self.config = config
        self._api: client.ApiClient | None = None

    async def endpoints(self) -> frozenset[Endpoint]:
        """Every ready address of the Service's slices, with the slice's port named
        ``port_name`` (None when not named). Raises DiscoveryError: ``credentials`` (no
        usable in-cluster account or kubeconfig), ``forbidden`` (401/403: RBAC),
        ``api`` (another status), ``unreachable`` (connect error, timeout)."""
        api = await self._client()
        selector = f"{SERVICE_LABEL}={self.config.service}"
        where = f"EndpointSlices of {self.config.namespace}/{self.config.service}"
        try:
            slices = await client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
                self.config.namespace, label_selector=selector,
                _request_timeout=REQUEST_TIMEOUT_S)
        except client.ApiException as exc:
            reason = "forbidden" if exc.status in (401, 403) else "api"
            raise DiscoveryError(f"listing {where}: HTTP {exc.status} {exc.reason}",
                                 reason=reason) from exc
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise DiscoveryError(f"listing {where}: {type(exc).__name__} {exc}".strip(),
                                 reason="unreachable") from exc
        return frozenset(e for s in slices.items for e in self._ready(s))

    def _ready(self, endpoint_slice: Any) -> list[Endpoint]:
        """The ready ``(address, port)`` of one slice (``ready`` unset counts as ready,
        as Kubernetes documents); none when the named port is not in it."""
        port: int | None = None
        if self.config.port_name is not None:
            named = [p.port for p in endpoint_slice.ports or []
                     if p.name == self.config.port_name and p.port]
            if not named:
                return []
            port = int(named[0])
        return [(address, port) for e in endpoint_slice.endpoints or []
                if e.conditions is None or e.conditions.ready is not False
                for address in e.addresses or []]

    async def _client(self) -> client.ApiClient:
        if self._api is None:
            configuration = client.Configuration()
            try:
                if self.config.kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
                    kube_config.load_incluster_config(client_configuration=configuration)
                else:
                    await kube_config.load_kube_config(config_file=self.config.kubeconfig,
                                                       client_configuration=configuration)
            except (ConfigException, OSError, ValueError) as exc:
                raise DiscoveryError(f"Kubernetes credentials: {exc}",
                                     reason="credentials") from exc
            self._api = client.ApiClient(configuration=configuration)
        return self._api

    async def close(self) -> None:
        """Close the API client's connections."""
        if self._api is not None:
            await self._api.close()
            self._api = None
