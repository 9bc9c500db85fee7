"""The anchor's config: the names other parts rely on, defaults, and errors with lines."""

from __future__ import annotations

import pytest

from llmroute.anchor.registry import register_builtins
from llmroute.anchor.wiring import anchor_deps
from llmroute.config import parse_config
from llmroute.errors import ConfigError
from llmroute.runtime import make_backends

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
    deps = anchor_deps(cfg)
    assert (deps.ttft_factor, deps.ttft_slack_ms, deps.ttft_keep) == (5.0, 250.0, 2)
    headroom = register_builtins().filter("ttft-headroom", deps)
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
