"""The endpoint source of a ``discovery:`` entry."""

from __future__ import annotations

from llmroute.config.discovery import DiscoveryConfig
from llmroute.discovery.dns import DnsSource
from llmroute.discovery.kubernetes import KubernetesSource
from llmroute.discovery.protocol import EndpointSource


def make_source(entry: DiscoveryConfig) -> EndpointSource:
    """The source ``entry.source`` names (no I/O: a Kubernetes client connects on its
    first refresh)."""
    if entry.source.dns is not None:
        return DnsSource(entry.source.dns)
    assert entry.source.kubernetes is not None  # the config allows exactly one
    return KubernetesSource(entry.source.kubernetes)
