"""The thermal latch and filter, the network and memory-bandwidth scorers, the quality
filter's shares, and what the store does with each good poll (median of the network
readings, rejected readings counted)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakes.anchor_ctx import backends, context, request, signals
from llmroute.anchor.filters.quality import QualityFilter, slot
from llmroute.anchor.filters.thermal import ThermalFilter
from llmroute.anchor.readings import NetMedian, ThermalLatch
from llmroute.anchor.scorers.mem_bandwidth import MemBandwidthScorer
from llmroute.anchor.scorers.network import NetworkScorer
from llmroute.anchor.store import SignalStore
from llmroute.types import QualityState, QualityView


def test_the_latch_turns_hot_at_the_limit_and_cools_only_below_the_hysteresis_band():
    latch = ThermalLatch(78.0, 3.0)
    readings = [70, 77.9, 78.0, 76.0, 75.1, 75.0, 77.0, 79.0, None, 74.0]
    changes = [latch.update("g", None if t is None else float(t), i)
               for i, t in enumerate(readings)]
    assert changes == [None, None, True, None, None, False, None, True, None, False]


def test_a_hot_reading_counts_only_while_it_is_fresh():
    latch = ThermalLatch()
    latch.update("g", 90.0, 10.0)
    assert latch.hot(11.0, fresh_s=2.0) == {"g"} and latch.hot(12.5, fresh_s=2.0) == set()


def test_the_store_latches_counts_rejected_and_smooths_the_network():
    store = SignalStore(2.0)
    for t, (temp, rtt) in enumerate([(80.0, 1.0), (None, 50.0), (79.0, 2.0)]):
        store.record_ok("g", signals(t, gpu_temp_c=temp, net_rtt_ms=rtt,
                                     rejected=("gpu_temp_c",) if temp is None else ()), t)
    assert store.hot(2.0) == {"g"} and store.entry("g").hot
    assert store.rejected == {("g", "gpu_temp_c"): 1}
    assert store.entry("g").signals.net_rtt_ms == 2.0  # the median of 1, 50 and 2


def test_the_network_median_ignores_one_outlier_and_keeps_missing_bytes_missing():
    net = NetMedian(5)
    for rtt in (4.0, 5.0, 900.0, 4.5, 5.5):
        out = net.smooth("b", signals(net_rtt_ms=rtt))
    assert out.net_rtt_ms == 5.0 and out.net_bytes_per_s is None


def test_thermal_filter_drops_hot_gpus_while_another_can_serve():
    cands = backends("a", "b", "c")
    assert [b.id for b in ThermalFilter().filter(context(hot=frozenset({"b"})), cands)] == [
        "a", "c"]
    assert ThermalFilter().filter(context(hot=frozenset({"a", "b", "c"})), cands) == cands
    assert ThermalFilter().filter(context(), cands) == cands


def view(state: QualityState, share: float) -> QualityView:
    return QualityView(state, share, 0.0)


def test_quality_filter_offers_a_demoted_backend_its_share_of_requests():
    cands = backends("a", "b")
    views = {"b": view(QualityState.CUT, 0.25)}
    kept = [ [c.id for c in QualityFilter().filter(
        context(req=request()._replace(request_id=f"r{i}"), quality=views), cands)]
        for i in range(4000)]
    share = sum("b" in k for k in kept) / len(kept)
    assert 0.22 < share < 0.28 and all("a" in k for k in kept)


def test_an_ejected_backend_is_never_offered_unless_nothing_else_is_left():
    cands = backends("a", "b")
    ejected = {"b": view(QualityState.EJECTED, 0.0)}
    assert [b.id for b in QualityFilter().filter(context(quality=ejected), cands)] == ["a"]
    both = {**ejected, "a": view(QualityState.EJECTED, 0.0)}
    assert QualityFilter().filter(context(quality=both), cands) == cands


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=10))
def test_a_slot_is_in_the_unit_interval_and_repeatable(rid, bid):
    assert 0.0 <= slot(rid, bid) < 1.0 and slot(rid, bid) == slot(rid, bid)


def test_network_scores_rtt_and_bandwidth_against_the_best_candidate():
    ctx = context(engines={"a": signals(net_rtt_ms=2.0, net_bytes_per_s=8e6),
                           "b": signals(net_rtt_ms=10.0, net_bytes_per_s=2e6),
                           "c": signals(net_rtt_ms=4.0),
                           "e": signals(net_rtt_ms=2.9, net_bytes_per_s=6e6)})  # alike: 1.0
    got = NetworkScorer().score(ctx, backends("a", "b", "c", "d", "e"))
    assert got == pytest.approx({"a": 1.0, "b": 0.5 * 0.3 + 0.5 * 0.375, "c": 0.75, "e": 1.0})


def test_mem_bandwidth_prefers_headroom():
    ctx = context(engines={"a": signals(gpu_mem_bw_util=0.9), "b": signals(gpu_mem_bw_util=0.2)})
    assert MemBandwidthScorer().score(ctx, backends("a", "b", "c")) == pytest.approx(
        {"a": 0.1, "b": 0.8})
