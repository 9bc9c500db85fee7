"""DNS as an endpoint source: the A/AAAA records of a name (a headless Kubernetes
Service resolves to its ready pods' addresses) through the event loop's ``getaddrinfo``
(so /etc/hosts counts too), or its SRV records through ``dnspython``'s async resolver
(each record's target and port)."""

from __future__ import annotations

import asyncio
import socket

import dns.asyncresolver
import dns.resolver
import dns.exception

from llmroute.config.discovery import DnsSourceConfig
from llmroute.discovery.protocol import Endpoint
from llmroute.errors import DiscoveryError

FAMILIES = {"A": socket.AF_INET, "AAAA": socket.AF_INET6}
"""The address family ``getaddrinfo`` is asked for, per record type."""


class DnsSource:
    """The endpoints of ``config.name`` (module docstring); ``resolver`` (SRV only):
    a ``dns.asyncresolver.Resolver`` (None: the system's ``/etc/resolv.conf``)."""

    kind = "dns"

    def __init__(self, config: DnsSourceConfig,
                 resolver: dns.asyncresolver.Resolver | None = None):
        self.config, self._resolver = config, resolver

    async def endpoints(self) -> frozenset[Endpoint]:
        """The name's addresses (port None) or SRV targets; a name that does not exist
        (NXDOMAIN, no records) is no endpoints. Raises DiscoveryError (``resolve``) when
        the resolver fails otherwise (timeout, no server answering)."""
        if self.config.type == "SRV":
            return await self._srv()
        return await self._addresses()

    async def _addresses(self) -> frozenset[Endpoint]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(self.config.name, None,
                                           family=FAMILIES[self.config.type],
                                           type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
                return frozenset()
            raise DiscoveryError(f"resolving {self.config.name} ({self.config.type}): "
                                 f"{exc}", reason="resolve") from exc
        return frozenset((str(info[4][0]), None) for info in infos)

    async def _srv(self) -> frozenset[Endpoint]:
        resolver = self._resolver or dns.asyncresolver.Resolver()
        try:
            answer = await resolver.resolve(self.config.name, "SRV")
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return frozenset()
        except dns.exception.DNSException as exc:
            raise DiscoveryError(f"resolving {self.config.name} (SRV): {exc}",
                                 reason="resolve") from exc
        return frozenset((r.target.to_text(omit_final_dot=True), int(r.port))
                         for r in answer)

    async def close(self) -> None:
        """Nothing to release."""
