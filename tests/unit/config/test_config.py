"""Config loading: the embedded default, and errors that name file:line: field."""

from __future__ import annotations

import pytest

from llmroute.config import load_config, parse_config
from llmroute.errors import ConfigError

GOOD = """\
pools:
  general: {}
  long: {}
backends:
  - id: a
    pool: general
    engine: vllm
    base_url: http://127.0.0.1:8001
  - id: b
    pool: long
    engine: llamacpp
    launch: {ctx_size: 8192, slots: 2}
routing:
  default_pool: general
  intents: {summarization: long}
"""


def test_embedded_default_has_three_local_engines_in_two_pools():
    cfg = load_config()
    assert len(cfg.backends) >= 3 and len(cfg.pools) >= 2
    assert all(b.launch is not None for b in cfg.backends)
    contexts = {b.id: b.effective_context() for b in cfg.backends}
    assert len(set(contexts.values())) >= 2


def test_good_config_and_effective_context():
    cfg = parse_config(GOOD, "r.yaml")
    assert [b.effective_context() for b in cfg.backends] == [4096, 4096]
    assert cfg.routing.intents == {"summarization": "long"}


BAD = [
    ("bad-type", GOOD.replace("slots: 2", "slots: two"), "r.yaml:12: backends.1.launch.slots"),
    ("unknown-engine", GOOD.replace("engine: vllm", "engine: tgi"), "r.yaml:7: backends.0.engine"),
    ("unknown-field", GOOD.replace("  general: {}", "  general: {colour: red}"),
     "r.yaml:2: pools.general.colour"),
    ("unknown-pool", GOOD.replace("    pool: long", "    pool: nope"), "r.yaml:10: backends.1.pool"),
    ("default-pool", GOOD.replace("default_pool: general", "default_pool: x"),
     "r.yaml:14: routing.default_pool"),
    ("intent-pool", GOOD.replace("{summarization: long}", "{summarization: big}"),
     "r.yaml:15: routing.intents.summarization"),
    ("both-url-and-launch", GOOD.replace("    launch:", "    base_url: http://x\n    launch:"),
     "r.yaml:9: backends.1"),
    ("duplicate-id", GOOD.replace("  - id: b", "  - id: a"), "r.yaml:9: backends.1.id"),
    ("empty-pool", GOOD.replace("  long: {}", "  long: {}\n  spare: {}"), "r.yaml:4: pools.spare"),
    ("yaml-syntax", GOOD.replace("pools:", "pools: [", 1), "r.yaml:"),
    ("not-a-mapping", "- 1\n- 2\n", "r.yaml:1:"),
    ("header-bound", "server: {max_header_bytes: 100}\n" + GOOD,
     "r.yaml:1: server.max_header_bytes"),
    ("header-timeout", "server: {header_timeout_s: 0}\n" + GOOD,
     "r.yaml:1: server.header_timeout_s"),
    ("body-timeout", "server: {body_timeout_s: -1}\n" + GOOD, "r.yaml:1: server.body_timeout_s"),
    ("negative-price", GOOD.replace("  long: {}", "  long:\n    price: {input_per_mtok: 1, "
                                    "output_per_mtok: -2}"), "r.yaml:4: pools.long.price."
     "output_per_mtok: Input should be greater than or equal to 0"),
    ("text-price", GOOD.replace("  general: {}", "  general:\n    price:\n      "
                                "input_per_mtok: '0.5'\n      output_per_mtok: 1"),
     "r.yaml:4: pools.general.price.input_per_mtok: Input should be a valid number"),
    ("nan-price", GOOD.replace("  long: {}", "  long: {price: {input_per_mtok: .nan, "
                               "output_per_mtok: 1}}"), "r.yaml:3: pools.long.price."
     "input_per_mtok: Input should be a finite number"),
    ("half-a-price", GOOD.replace("  long: {}", "  long: {price: {input_per_mtok: 1}}"),
     "r.yaml:3: pools.long.price.output_per_mtok: Field required"),
]


@pytest.mark.parametrize(("text", "where"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_errors_name_file_line_and_field(text, where):
    with pytest.raises(ConfigError) as info:
        parse_config(text, "r.yaml")
    assert where in str(info.value)


def test_a_pool_price_is_read_and_reaches_its_backends():
    from llmroute.assemble.runtime import make_backends
    from llmroute.types import Price
    cfg = parse_config(GOOD.replace("  general: {}", "  general: {price: {input_per_mtok: 0.5, "
                                    "output_per_mtok: 1.5}}"), "r.yaml")
    backends = make_backends(cfg, {"b": "http://127.0.0.1:9"})
    assert backends["a"].price == Price(0.5, 1.5) and backends["b"].price is None
    assert Price(0.5, 1.5).cost(2_000_000, 1_000_000) == 2.5
    assert Price(0.5, 1.5).blended == 1.0


def test_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
