"""The sample filter: a large pool's decision scores a bounded sample — every backend up to
``above``, else ``size`` of them, the longest prefix holders first and a uniform rest."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from fakes.anchor_ctx import backends, context, request

from llmroute.anchor.affinity import PrefixIndex
from llmroute.anchor.filters.sample import SampleFilter
from llmroute.anchor.prefix import Affinity
from llmroute.anchor.presets import presets
from llmroute.anchor.registry import Shared, register_builtins
from llmroute.assemble.anchor import build_profile
from llmroute.config import AnchorConfig
from llmroute.errors import ConfigError

POOL = backends(*(f"b{i:03d}" for i in range(300)))


def text(*ids: int) -> str:
    """A prompt of 12-character blocks (4 tokens each)."""
    return "".join(f"{i:011d}|" for i in ids)


def test_a_pool_up_to_above_is_kept_whole_and_in_order():
    f = SampleFilter(128, 64, Affinity(), random.Random(0))
    assert f.filter(context(), POOL[:128]) == POOL[:128]


def test_a_larger_pool_keeps_size_distinct_backends_in_the_given_order():
    f = SampleFilter(128, 64, Affinity(), random.Random(0))
    kept = f.filter(context(), POOL)
    assert len(kept) == 64 == len({b.id for b in kept})
    assert kept == sorted(kept, key=POOL.index)


def test_the_rest_is_drawn_uniformly():
    f = SampleFilter(128, 64, Affinity(), random.Random(1))
    seen = Counter(b.id for _ in range(600) for b in f.filter(context(), POOL))
    expected = 600 * 64 / 300  # 128 draws each
    assert len(seen) == 300
    assert all(0.6 * expected < n < 1.4 * expected for n in seen.values())


def test_prefix_holders_are_always_in_the_sample_longest_first_up_to_half():
    affinity = Affinity(PrefixIndex(block_tokens=4))
    affinity.pricing = True
    prompt = text(1, 2, 3, 4)
    for i in range(40):  # b000…b039 hold 1–4 of the prompt's blocks
        affinity.dispatched(request(text(*range(1, 2 + i % 4)), prompt_tokens=4 * (1 + i % 4)),
                            POOL[i].id, 4)
    f = SampleFilter(128, 64, affinity, random.Random(0))
    ctx = context(req=request(prompt + "x", prompt_tokens=17))
    kept = {b.id for b in f.filter(ctx, POOL)}
    deepest = {POOL[i].id for i in range(40) if i % 4 == 3}  # all four blocks
    assert deepest <= kept
    assert len(kept & {b.id for b in POOL[:40]}) >= 32  # half the sample: holders first


def test_holders_filtered_out_before_the_sample_take_no_place_in_it():
    affinity = Affinity(PrefixIndex(block_tokens=4))
    affinity.pricing = True
    prompt = text(1, 2, 3, 4)
    for i in range(40):  # b000…b039 hold the whole prompt, b040 half of it
        affinity.dispatched(request(prompt, prompt_tokens=16), POOL[i].id, 16)
    affinity.dispatched(request(text(1, 2), prompt_tokens=8), POOL[40].id, 8)
    ctx = context(req=request(prompt + "x", prompt_tokens=17))
    held = affinity.holders(ctx, POOL)  # longest first
    assert set(held[:40]) == {b.id for b in POOL[:40]} and held[40:] == [POOL[40].id]
    f = SampleFilter(128, 64, affinity, random.Random(0))
    kept = f.filter(ctx, POOL[40:])  # the 40 deepest holders were filtered out
    assert len(kept) == 64 and POOL[40] in kept
    assert not {b.id for b in kept} & {b.id for b in POOL[:40]}


def test_without_pricing_holders_get_no_place_of_their_own():
    affinity = Affinity(PrefixIndex(block_tokens=4))
    affinity.dispatched(request(text(1, 2), prompt_tokens=8), "b000", 8)
    f = SampleFilter(128, 64, affinity, random.Random(3))
    picks = [any(b.id == "b000" for b in f.filter(context(req=request(text(1, 2) + "x",
                                                                       prompt_tokens=9)), POOL))
             for _ in range(200)]
    assert 0.1 < sum(picks) / 200 < 0.35  # 64 of 300: ≈ 0.21


def test_every_preset_samples_before_the_headroom_filter():
    for name in presets():
        profile = build_profile(AnchorConfig(preset=name), register_builtins(), Shared())
        names = [type(f).__name__ for f in profile.filters]
        assert "SampleFilter" in names
        if "TtftHeadroomFilter" in names:
            assert names.index("SampleFilter") == names.index("TtftHeadroomFilter") - 1


def test_the_sample_is_configured_by_its_params():
    cfg = AnchorConfig.model_validate({"filters": {"sample": {"params": {"above": 500,
                                                                         "size": 100}}}})
    profile = build_profile(cfg, register_builtins(), Shared())
    sample = next(f for f in profile.filters if isinstance(f, SampleFilter))
    assert (sample.above, sample.size) == (500, 100)
    with pytest.raises(ValueError, match="size"):
        AnchorConfig.model_validate({"filters": {"sample": {"params": {"size": 0}}}})
    with pytest.raises((ValueError, ConfigError), match="unknown"):
        AnchorConfig.model_validate({"filters": {"sample": {"params": {"unknown": 1}}}})


def test_a_profile_over_a_large_pool_ranks_the_sample_only():
    profile = build_profile(AnchorConfig(preset="least-in-flight"), register_builtins(),
                            Shared())
    ranked = profile.rank(context(), POOL)
    assert len(ranked) == 64
