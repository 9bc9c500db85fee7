"""DNS sources against real resolvers: ``localhost`` through ``getaddrinfo`` (A and
AAAA), a name that does not exist, and SRV records served by a DNS server on loopback
(dnspython builds its answers) to dnspython's async resolver."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import dns.asyncresolver
import dns.message
import dns.rcode
import dns.rrset
import pytest

from llmroute.config.discovery import DnsSourceConfig
from llmroute.discovery.dns import DnsSource
from llmroute.errors import DiscoveryError

SRV = ["0 50 8000 vllm-0.vllm.llm.svc.cluster.local.",
       "0 50 8001 vllm-1.vllm.llm.svc.cluster.local."]


class _Dns(asyncio.DatagramProtocol):
    """Answers SRV queries for ``vllm.llm.svc`` with ``SRV``, NXDOMAIN for other names;
    ``drop`` True: answers nothing (a resolver timeout)."""

    drop = False

    def connection_made(self, transport):  # type: ignore[no-untyped-def]
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:  # type: ignore[no-untyped-def]
        if self.drop:
            return
        query = dns.message.from_wire(data)
        answer = dns.message.make_response(query)
        name = query.question[0].name
        if name.to_text() == "vllm.llm.svc.":
            answer.answer.append(dns.rrset.from_text(name, 30, "IN", "SRV", *SRV))
        else:
            answer.set_rcode(dns.rcode.NXDOMAIN)
        self.transport.sendto(answer.to_wire(), addr)


@contextlib.asynccontextmanager
async def dns_server() -> AsyncIterator[tuple[_Dns, dns.asyncresolver.Resolver]]:
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(_Dns, local_addr=("127.0.0.1", 0))
    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers = ["127.0.0.1"]
    resolver.port = transport.get_extra_info("sockname")[1]
    resolver.lifetime = 0.5
    try:
        yield proto, resolver
    finally:
        transport.close()


async def test_localhost_resolves_through_getaddrinfo():
    assert await DnsSource(DnsSourceConfig(name="localhost")).endpoints() == {
        ("127.0.0.1", None)}


async def test_a_name_that_does_not_exist_is_no_endpoints():
    assert await DnsSource(DnsSourceConfig(name="no-such-engine.invalid")).endpoints() == set()


async def test_srv_records_give_targets_and_ports():
    async with dns_server() as (server, resolver):
        source = DnsSource(DnsSourceConfig(name="vllm.llm.svc", type="SRV"), resolver)
        found = await source.endpoints()
        missing = await DnsSource(DnsSourceConfig(name="other.llm.svc", type="SRV"),
                                  resolver).endpoints()
        server.drop = True
        with pytest.raises(DiscoveryError) as err:
            await source.endpoints()
    assert found == {("vllm-0.vllm.llm.svc.cluster.local", 8000),
                     ("vllm-1.vllm.llm.svc.cluster.local", 8001)}
    assert missing == set() and err.value.reason == "resolve"
