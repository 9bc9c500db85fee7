"""The endpoint source of a ``discovery:`` entry."""

from __future__ import annotations

from llmroute.config.discovery import DiscoveryConfig
from llmroute.discovery.protocol import EndpointSource


def make_source(entry: DiscoveryConfig) -> EndpointSource:
    """The source ``entry.source`` names (no I/O: a Kubernetes client connects on its
    first refresh). Each source's client library (dnspython, kubernetes_asyncio) is imported
    here, so a router without that source never pays for it (kubernetes_asyncio's models
    took 0.75 s at load 6, ``python -X importtime``: a third of ``assemble.serve``'s)."""
    if entry.source.dns is not None:
        from llmroute.discovery.dns import DnsSource

        return DnsSource(entry.source.dns)
    from llmroute.discovery.kubernetes import KubernetesSource

    assert entry.source.kubernetes is not None  # the config allows exactly one
    return KubernetesSource(entry.source.kubernetes)
