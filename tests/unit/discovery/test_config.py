"""The ``discovery:`` section: templates checked at load, stable backend ids."""

from __future__ import annotations

import pytest

from llmroute.config import parse_config
from llmroute.config.discovery import DiscoveryConfig
from llmroute.errors import ConfigError

HEAD = "pools: {p: {}}\nrouting: {default_pool: p}\n"
DNS = "source: {dns: {name: vllm.llm.svc.cluster.local}}"


def entry(extra: str, source: str = DNS) -> str:
    return f"discovery:\n  - {{id_prefix: vllm, pool: p, engine: vllm, {extra}{source}}}\n"


def test_a_discovery_only_config_loads():
    config = parse_config(HEAD + entry("port: 8000, "), "x.yaml")
    assert config.backends == [] and config.discovery[0].interval_s == 10.0


@pytest.mark.parametrize(("text", "message"), [
    (HEAD, "x.yaml:1: backends: List should have at least 1 item (or give discovery)"),
    (HEAD + entry(""), "give port"),
    (HEAD + entry("port: 80, ", "source: {}"), "give exactly one of dns or kubernetes"),
    (HEAD + entry("port: 80, engine: nope, ").replace("engine: vllm, ", "", 1),
     "x.yaml:4: discovery.0.engine: Value error, unknown engine kind 'nope'"),
    (HEAD + entry("port: 80, ").replace("pool: p", "pool: z"), "unknown pool 'z'"),
    (HEAD + entry("port: 80, ", "source: {dns: {name: x, type: MX}}"), "dns.type"),
    (HEAD + entry("port: 80, ") + entry("port: 81, ").replace("discovery:\n", ""),
     "x.yaml:5: discovery.1.id_prefix: duplicate id_prefix 'vllm'"),
], ids=["nothing", "no-port", "no-source", "engine", "pool", "record-type", "repeated"])
def test_bad_discovery_entries_are_refused_with_the_field(text, message):
    with pytest.raises(ConfigError, match="discovery|backends") as err:
        parse_config(text, "x.yaml")
    assert message in err.value.message


@pytest.mark.parametrize(("host", "port", "id_", "url"), [
    ("10.0.0.7", None, "vllm-10.0.0.7-8000", "http://10.0.0.7:8000"),
    ("fd00::7", 9000, "vllm-fd00__7-9000", "http://[fd00::7]:9000"),
    ("vllm-0.vllm.llm.svc", 8001, "vllm-vllm-0.vllm.llm.svc-8001",
     "http://vllm-0.vllm.llm.svc:8001"),
], ids=["ipv4", "ipv6", "srv-target"])
def test_a_discovered_backend_id_is_stable_and_its_url_well_formed(host, port, id_, url):
    d = DiscoveryConfig.model_validate({"id_prefix": "vllm", "pool": "p", "engine": "vllm",
                                        "port": 8000, "api_key_env": "K",
                                        "source": {"dns": {"name": "x"}}})
    assert d.backend(host, port) == {"id": id_, "pool": "p", "engine": "vllm",
                                     "model": "smollm2-135m-instruct", "base_url": url,
                                     "api_key_env": "K"}
