"""bench/gate_public_rows.py: capped, source-tagged rows from the permissive public sets."""

from __future__ import annotations

import json
from collections import Counter

import pytest


@pytest.fixture(scope="module")
def rows_module(bench_module):
    return bench_module("gate_public_rows")


def test_rows_are_tagged_and_capped_per_intent(rows_module):
    rows = iter([{"text": f"q{i}", "intent": "math"} for i in range(50)]
                + [{"text": "w", "intent": "chat"}])
    out = list(rows_module.capped("gsm8k", rows))
    assert Counter(r["intent"] for r in out) == {"math": 30, "chat": 1}
    assert {r["source"] for r in out} == {"gsm8k"}


def test_the_shipped_public_rows_keep_their_quotas_and_licences(rows_module):
    import gate_quality

    shipped = [json.loads(line) for line in gate_quality.SHIPPED.read_text().splitlines() if line]
    counts = Counter((r["source"], r["intent"]) for r in shipped if r.get("source"))
    assert counts, "the shipped utterances carry public rows"
    assert {s for s, _ in counts} <= set(rows_module.SOURCES) <= gate_quality.TRAINABLE
    # MT-Bench gives 10 a category; two of its categories are open_qa
    assert all(n <= rows_module.QUOTAS.get(key, 20) for key, n in counts.items())
    assert not {"bfcl", "glaive"} & {s for s, _ in counts}
