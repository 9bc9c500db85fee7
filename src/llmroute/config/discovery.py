"""The ``discovery:`` section: backends declared as a template plus a source of endpoints
(DNS records of a name, or a Kubernetes Service's EndpointSlices), refreshed every
``interval_s`` through the reload path (``assemble/discovery.py``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from llmroute.config.base import Strict

_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class DnsSourceConfig(Strict):
    """Resolve ``name``: ``A`` / ``AAAA`` through the system resolver (``getaddrinfo``:
    /etc/hosts, then DNS), the template's ``port``; ``SRV``: each record's target and
    port (``dnspython``'s async resolver)."""

    name: str = Field(min_length=1)
    type: Literal["A", "AAAA", "SRV"] = "A"


class KubernetesSourceConfig(Strict):
    """The ready endpoints of Service ``service`` in ``namespace`` (its EndpointSlices,
    label ``kubernetes.io/service-name``); the port named ``port_name`` in each slice
    (absent: the template's ``port``). Credentials: in-cluster (the pod's service
    account) when ``kubeconfig`` is None and the pod env says so, else ``kubeconfig``
    (None: ``$KUBECONFIG`` or ``~/.kube/config``)."""

    namespace: str = Field("default", min_length=1)
    service: str = Field(min_length=1)
    port_name: str | None = None
    kubeconfig: str | None = None


class SourceConfig(Strict):
    """Exactly one of ``dns`` or ``kubernetes``."""

    dns: DnsSourceConfig | None = None
    kubernetes: KubernetesSourceConfig | None = None

    @model_validator(mode="after")
    def _one(self) -> SourceConfig:
        if (self.dns is None) == (self.kubernetes is None):
            raise ValueError("give exactly one of dns or kubernetes")
        return self


class DiscoveryConfig(Strict):
    """One discovered group of backends. Each endpoint ``host:port`` becomes a backend
    with id ``{id_prefix}-{host}-{port}`` (an IPv6 address's colons as ``_``; stable: the same endpoints give the same ids,
    so a refresh that finds them again changes nothing), base URL
    ``{scheme}://{host}:{port}`` and the template fields (``pool``, ``engine``,
    ``model``, key, context length, capabilities, timeouts) as a ``backends`` entry.
    ``interval_s``: seconds between two refreshes; ``health_timeout_s``: how long a
    newcomer may take to answer its health check (else it is left out until the next
    refresh); ``empty_grace_s``: how long the last known set is kept when the source
    answers with no endpoints at all (then the group is drained)."""

    id_prefix: str = Field(pattern=_ID)
    pool: str
    engine: str
    model: str = "smollm2-135m-instruct"
    port: int | None = Field(None, ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    context_length: int | None = Field(None, ge=1)
    api_key: str | None = None
    api_key_env: str | None = None
    capabilities: tuple[str, ...] | None = None
    ttft_s: float | None = Field(None, gt=0)
    stall_s: float | None = Field(None, gt=0)
    source: SourceConfig
    interval_s: float = Field(10.0, gt=0)
    health_timeout_s: float = Field(5.0, gt=0)
    empty_grace_s: float = Field(30.0, ge=0)

    @model_validator(mode="after")
    def _port(self) -> DiscoveryConfig:
        srv = self.source.dns is not None and self.source.dns.type == "SRV"
        named = self.source.kubernetes is not None and self.source.kubernetes.port_name
        if self.port is None and not (srv or named):
            raise ValueError("give port (only SRV records and kubernetes.port_name "
                             "carry their own)")
        return self

    def backend(self, host: str, port: int | None) -> dict[str, object]:
        """The ``backends`` entry of endpoint ``host:port`` (``port`` None: the
        template's), as a mapping for ``BackendConfig``; an IPv6 ``host`` is bracketed in
        the URL."""
        port = port or self.port
        shown = f"[{host}]" if ":" in host else host
        entry: dict[str, object] = {
            "id": f"{self.id_prefix}-{host.replace(':', '_')}-{port}",
            "pool": self.pool, "engine": self.engine, "model": self.model,
            "base_url": f"{self.scheme}://{shown}:{port}"}
        for name in ("context_length", "api_key", "api_key_env", "capabilities",
                     "ttft_s", "stall_s"):
            if getattr(self, name) is not None:
                entry[name] = getattr(self, name)
        return entry
