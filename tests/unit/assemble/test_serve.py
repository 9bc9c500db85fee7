"""``assemble.serve.serving_gc``: the collector's settings while serving, restored after."""

from __future__ import annotations

import gc

from llmroute.assemble.serve import GC_YOUNG_THRESHOLD, serving_gc


def test_serving_gc_freezes_what_exists_and_restores_the_collector_after():
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with serving_gc():
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > frozen
        assert gc.isenabled()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
