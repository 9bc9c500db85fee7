"""The anchor's config: the names other parts rely on, defaults, and errors with lines."""

from __future__ import annotations

import pytest

from llmroute.assemble.anchor import build_profile
from llmroute.anchor.registry import register_builtins
from llmroute.assemble.anchor import anchor_shared
from llmroute.config import parse_config
from llmroute.errors import ConfigError
from llmroute.assemble.runtime import make_backends

BASE = """\
pools:
  code: {strengths: [code, math], max_complexity: 4}
backends:
  - {id: x, pool: code, engine: emulator, base_url: "http://h:1", capabilities: [tools]}
routing: {default_pool: code}
"""


def test_defaults_and_pool_declarations():
    cfg = parse_config(BASE, "t.yaml")
    a = cfg.anchor
    assert (a.preset, a.scorers, a.picker, a.softmax_temperature) == ("default", {}, None, 0.1)
    assert (a.poll_interval_s, a.poll_timeout_s, a.stale_after_s) == (0.2, 0.5, 2.0)
    assert cfg.pools["code"].strengths == ("code", "math")
    assert cfg.pools["code"].max_complexity == 4
    assert make_backends(cfg, {})["x"].capabilities == frozenset({"tools"})


def test_full_anchor_section():
    cfg = parse_config("anchor: {preset: seed-001, scorers: {error-rate: 0.5}, picker: p2c}\n"
                       + BASE, "t.yaml")
    assert cfg.anchor.preset == "seed-001" and cfg.anchor.picker == "p2c"


def test_ttft_headroom_settings_reach_the_filter():
    cfg = parse_config("anchor: {ttft_headroom_factor: 5, ttft_headroom_ms: 250, "
                       "ttft_headroom_keep: 2}\n" + BASE, "t.yaml")
    params = cfg.anchor.params("filter", "ttft-headroom")
    assert (params.factor, params.slack_ms, params.keep) == (5.0, 250.0, 2)
    headroom = register_builtins().filter("ttft-headroom", anchor_shared(cfg), params)
    assert (headroom._factor, headroom._slack_ms, headroom._keep) == (5.0, 250.0, 2)


@pytest.mark.parametrize("yaml_text,where", [
    ("anchor: {preset: fastest}\n" + BASE, "t.yaml:1: anchor.preset"),
    ("anchor: {ttft_headroom_factor: 0.5}\n" + BASE, "t.yaml:1: anchor.ttft_headroom_factor"),
    ("anchor: {ttft_headroom_keep: 0}\n" + BASE, "t.yaml:1: anchor.ttft_headroom_keep"),
    ("anchor: {picker: lottery}\n" + BASE, "t.yaml:1: anchor.picker"),
    (BASE.replace('capabilities: [tools]}',
                  'gpu: {nvml_index: 0, dcgm_url: "http://d:9400/metrics"}}'),
     "t.yaml:4: backends.0.gpu"),
    (BASE.replace('capabilities: [tools]', 'capabilities: [telepathy]'),
     "t.yaml:4: backends.0.capabilities.0"),
], ids=["unknown-preset", "headroom-below-one", "keep-none", "unknown-picker",
        "two-gpu-sources", "unknown-capability"])
def test_errors_name_file_line_and_field(yaml_text, where):
    with pytest.raises(ConfigError) as err:
        parse_config(yaml_text, "t.yaml")
    assert where in err.value.message


PARAMS = """\
anchor:
  preset: seed-001
  picker: softmax
  scorers:
    error-rate: 0.5
    latency: {weight: 0.3}
  filters:
    context-fit: {params: {kv_threshold: 0.9}}
    ttft-headroom:
      params: {factor: 2, keep: 4}
  pickers:
    softmax: {params: {temperature: 0.25}}
  ttft_headroom: true
"""


def test_each_plugin_gets_its_own_params():
    cfg = parse_config(PARAMS + BASE, "t.yaml")
    a = cfg.anchor
    assert {n: e.weight for n, e in a.scorers.items()} == {"error-rate": 0.5, "latency": 0.3}
    assert a.params("filter", "context-fit").kv_threshold == 0.9
    assert a.params("filter", "context-fit").kv_min_fraction == 0.5  # its default
    headroom = a.params("filter", "ttft-headroom")
    assert (headroom.factor, headroom.slack_ms, headroom.keep) == (2.0, 1000.0, 4)
    profile = build_profile(a, register_builtins(), anchor_shared(cfg))
    by_type = {type(f).__name__: f for f in profile.filters}
    assert by_type["ContextFitFilter"]._threshold == 0.9
    assert (by_type["TtftHeadroomFilter"]._factor, by_type["TtftHeadroomFilter"]._keep) == (2, 4)
    assert profile.picker._t == 0.25
    assert dict((s.name, w) for s, w in profile.scorers)["latency"] == 0.3


def test_flat_keys_are_another_spelling_of_the_params():
    flat = parse_config("anchor: {softmax_temperature: 0.3, kv_pressure_threshold: 0.7}\n"
                        + BASE, "t.yaml").anchor
    nested = parse_config("anchor: {pickers: {softmax: {params: {temperature: 0.3}}}, "
                          "filters: {context-fit: {params: {kv_threshold: 0.7}}}}\n"
                          + BASE, "t.yaml").anchor
    for kind, name in (("picker", "softmax"), ("filter", "context-fit")):
        assert flat.params(kind, name) == nested.params(kind, name)


@pytest.mark.parametrize("yaml_text,where", [
    (PARAMS.replace("factor: 2", "facter: 2"),
     "t.yaml:10: anchor.filters.ttft-headroom.params.facter"),
    (PARAMS.replace("factor: 2", "factor: 0.5"),
     "t.yaml:10: anchor.filters.ttft-headroom.params.factor"),
    (PARAMS.replace("{weight: 0.3}", "{weight: 0.3, params: {window: 5}}"),
     "t.yaml:6: anchor.scorers.latency.params.window"),
    (PARAMS.replace("pickers:", "pickers:\n    argmax: {params: {ties: first}}"),
     "t.yaml:12: anchor.pickers.argmax.params.ties"),
    (PARAMS.replace("{weight: 0.3}", "{params: {}}"), "t.yaml:6: anchor.scorers.latency.weight"),
    ("anchor: {softmax_temperature: 0.3, pickers: {softmax: {params: {temperature: 0.2}}}}\n",
     "t.yaml:1: anchor: Value error, softmax_temperature and pickers.softmax.params.temperature"),
], ids=["unknown-param", "param-out-of-range", "scorer-without-params", "picker-without-params",
        "scorer-without-weight", "both-spellings"])
def test_plugin_param_errors_name_file_line_and_field(yaml_text, where):
    with pytest.raises(ConfigError) as err:
        parse_config(yaml_text + BASE, "t.yaml")
    assert where in err.value.message


@pytest.mark.parametrize("section", ["filters", "pickers"])
def test_an_unknown_plugin_type_is_a_config_error_naming_it(section):
    cfg = parse_config(f"anchor: {{{section}: {{vibes: {{}}}}}}\n" + BASE, "t.yaml")
    with pytest.raises(ConfigError, match=f"unknown {section[:-1]} 'vibes'"):
        build_profile(cfg.anchor, register_builtins(), anchor_shared(cfg))
