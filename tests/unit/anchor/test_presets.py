"""Presets and the plugin registry: names, merging, picker override, errors."""

from __future__ import annotations

import pytest

from llmroute.anchor.presets import FILTERS, HEADROOM, SAMPLE, presets, resolve
from llmroute.assemble.anchor import build_profile
from llmroute.anchor.registry import Shared, register_builtins
from llmroute.config import AnchorConfig
from llmroute.errors import ConfigError

SCORERS = {"queue-depth", "kv-cache", "free-vram", "gpu-util", "in-flight", "latency",
           "error-rate", "throughput", "prefix-affinity", "intent-fit", "health",
           "expected-ttft", "kv-balance", "mem-bandwidth", "network"}


def test_builtins_are_registered_by_kebab_case_name():
    reg = register_builtins()
    assert set(reg.scorers) == SCORERS
    assert set(reg.pickers) == {"argmax", "p2c", "softmax", "round-robin"}
    assert set(reg.filters) == {*FILTERS, HEADROOM, SAMPLE}
    for name in SCORERS:
        assert reg.scorer(name, Shared()).name == name


def test_registry_names_unknown_plugins():
    reg = register_builtins()
    with pytest.raises(ConfigError, match="unknown scorer 'vibes'.*queue-depth"):
        reg.scorer("vibes", Shared())


@pytest.mark.parametrize("name,weights,picker", [
    ("seed-000", {"free-vram": 0.4, "gpu-util": 0.3, "network": 0.2, "queue-depth": -0.1},
     "argmax"),
    ("seed-001", {"free-vram": 0.3, "latency": 0.25, "error-rate": 0.2, "throughput": 0.15,
                  "health": 0.1}, "argmax"),
    ("least-in-flight", {"in-flight": 1.0}, "argmax"),
    ("round-robin", {}, "round-robin"),
], ids=["seed-000", "seed-001", "least-in-flight", "round-robin"])
def test_preset_definitions(name, weights, picker):
    p = presets()[name]
    assert dict(p.weights) == weights and p.picker == picker


def test_config_weights_merge_over_the_preset_and_zero_removes():
    cfg = AnchorConfig(preset="default", scorers={"kv-cache": 0, "prefix-affinity": 0.2},
                       picker="softmax")
    p = resolve(cfg)
    assert "kv-cache" in dict(presets()["default"].weights)
    assert "kv-cache" not in dict(p.weights)
    assert dict(p.weights)["prefix-affinity"] == 0.2
    assert dict(p.weights)["queue-depth"] == dict(presets()["default"].weights)["queue-depth"]
    assert p.picker == "softmax"


def test_unknown_scorer_in_config_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown scorer"):
        build_profile(AnchorConfig(scorers={"nope": 1.0}), register_builtins(), Shared())


@pytest.mark.parametrize("name", list(presets()), ids=list(presets()))
def test_every_preset_builds(name):
    profile = build_profile(AnchorConfig(preset=name), register_builtins(), Shared())
    headroom = name == "default"  # only the tuned preset drops slow-to-answer backends
    assert len(profile.filters) == len(FILTERS) + 1 + headroom  # + sample
    assert (type(profile.filters[-1]).__name__ == "TtftHeadroomFilter") is headroom


@pytest.mark.parametrize("preset,switch,expected", [
    ("default", None, True), ("default", False, False), ("seed-001", True, True),
    ("least-in-flight", None, False)])
def test_ttft_headroom_follows_the_preset_unless_config_says(preset, switch, expected):
    profile = build_profile(AnchorConfig(preset=preset, ttft_headroom=switch),
                            register_builtins(), Shared())
    names = [type(f).__name__ for f in profile.filters]
    assert ("TtftHeadroomFilter" in names) is expected
