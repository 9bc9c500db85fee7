"""Triggers (every condition of ``when``), priority, the intent index, and the built-in
fallback."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.errors import ModelNotFound
from llmroute.strategy.loader import Loader
from llmroute.strategy.protocol import KindContext
from llmroute.strategy.registry import register_builtins
from llmroute.strategy.single import SingleSpec, build_single
from llmroute.strategy.snapshot import Entry
from llmroute.strategy.triggers import Facts
from llmroute.types import Backend, ChatRequest, Intent

CTX = KindContext({b.id: b for b in [
    Backend("g1", "general", "vllm", "http://a", "small", 4096),
    Backend("l1", "long", "vllm", "http://c", "big", 32768),
    Backend("c1", "code", "vllm", "http://d", "coder", 8192),
]}, {"summarization": "long"}, "general", 3)
BUILTIN = Loader(register_builtins(), CTX).builtin()


def request(text: str = "hello", model: str = "auto", tokens: int | None = None
            ) -> ChatRequest:
    return ChatRequest("chat", {}, model, False, text,
                       len(text) // 4 if tokens is None else tokens, None, "r")


def entry(sid: str = "s", priority: int = 0, pool: str = "long", **when) -> Entry:
    spec = SingleSpec(strategy_id=sid, version=1, priority=priority, kind="single",
                      pool=pool, when=when)
    return Entry.of(spec, f"{sid}.yaml", None, build_single(spec, CTX))


CHAT = Intent("chat", 0.9)


@pytest.mark.parametrize(("when", "req", "intent", "headers", "hit"), [
    ({}, request(), CHAT, {}, True),
    ({"intents": ["code"]}, request(), Intent("code", 0.9), {}, True),
    ({"intents": ["code"]}, request(), CHAT, {}, False),
    ({"intents": ["code"]}, request(), Intent("chat", 0.5, composite=("chat", "code")), {},
     True),
    ({"composite": True}, request(), Intent("chat", 0.5, composite=("chat", "code")), {},
     True),
    ({"composite": True}, request(), CHAT, {}, False),
    ({"composite": False}, request(), CHAT, {}, True),
    ({"conflict_above": 0.5}, request(), Intent("chat", 0.5, conflict=0.7), {}, True),
    ({"conflict_above": 0.5}, request(), Intent("chat", 0.5, conflict=0.5), {}, False),
    ({"confidence_below": 0.6}, request(), Intent("chat", 0.5), {}, True),
    ({"confidence_below": 0.6}, request(), CHAT, {}, False),
    ({"complexity": {"min": 2, "max": 3}}, request(), Intent("chat", 1, complexity=3.0), {},
     True),
    ({"complexity": {"min": 2}}, request(), Intent("chat", 1, complexity=1.5), {}, False),
    ({"prompt_tokens": {"max": 10}}, request(tokens=10), CHAT, {}, True),
    ({"prompt_tokens": {"min": 11}}, request(tokens=10), CHAT, {}, False),
    ({"keywords": ["Traceback", "panic:"]}, request("a TRACEBACK here"), CHAT, {}, True),
    ({"keywords": ["a.b"]}, request("axb"), CHAT, {}, False),
    ({"regex": r"\bSELECT\b.*\bFROM\b"}, request("SELECT x FROM t"), CHAT, {}, True),
    ({"regex": r"^\d+$"}, request("12a"), CHAT, {}, False),
    ({"model": ["code"]}, request(model="code"), CHAT, {}, True),
    ({"model": ["code"]}, request(), CHAT, {}, False),
    ({"tenant": ["acme"]}, request(), CHAT, {"x-llmroute-tenant": "acme"}, True),
    ({"tenant": ["acme"]}, request(), CHAT, {}, False),
    ({"api_key": ["ci"]}, request(), CHAT, {"x-llmroute-api-key-name": "ci"}, True),
    ({"priority_class": ["batch"]}, request(), CHAT, {"x-llmroute-priority": "online"},
     False),
    ({"headers": {"X-Team": "^(ml|data)$"}}, request(), CHAT, {"x-team": "ml"}, True),
    ({"headers": {"x-team": "^ml$"}}, request(), CHAT, {}, False),
    ({"intents": ["code"], "keywords": ["rust"]}, request("in rust"), Intent("code", 1), {},
     True),
    ({"intents": ["code"], "keywords": ["rust"]}, request("in go"), Intent("code", 1), {},
     False),
], ids=["empty-when", "intent", "intent-miss", "composite-label", "composite", "composite-miss",
        "not-composite", "conflict-above", "conflict-equal-miss", "confidence-below",
        "confidence-miss", "complexity-range", "complexity-miss", "tokens-inclusive-max",
        "tokens-miss", "keywords-case-insensitive", "keywords-literal", "regex", "regex-miss",
        "model", "model-miss", "tenant", "tenant-missing", "api-key", "priority-miss",
        "header-regex", "header-missing", "all-hold", "one-fails"])
def test_trigger(when, req, intent, headers, hit):
    s = BUILTIN.replaced([entry(**when)])
    assert (s.select(req, intent, headers).header == "s@1") is hit


def test_highest_priority_wins_ties_by_id():
    s = BUILTIN.replaced([entry("b", 5), entry("a", 5),
                                   entry("z", 9, intents=["code"]),
                                   entry("low", 1)])
    assert s.select(request(), CHAT).header == "a@1"
    assert s.select(request(), Intent("code", 1)).header == "z@1"


def test_no_match_gets_the_builtin_plan():
    s = BUILTIN.replaced([entry(intents=["code"])])
    m = s.choose(request(), Intent("summarization", 0.9))
    assert (m.header, m.kind, m.plan.pool) == ("builtin-single@0", "single", "long")
    assert m.snapshot is s


def test_a_matched_single_pins_its_pool():
    m = BUILTIN.replaced([entry(pool="code")]).choose(request(), CHAT)
    assert (m.header, m.plan.pool, m.plan.backend_ids) == ("s@1", "code", ("c1",))


def test_an_unknown_model_is_still_404():
    s = BUILTIN.replaced([entry()])
    with pytest.raises(ModelNotFound):
        s.choose(request(model="gpt-9"), CHAT)


LABELS = ["code", "chat", "math"]
WHENS = st.fixed_dictionaries({}, optional={
    "intents": st.lists(st.sampled_from(LABELS), min_size=1, max_size=2),
    "keywords": st.lists(st.sampled_from(["x", "y"]), min_size=1, max_size=1),
    "prompt_tokens": st.builds(dict, min=st.integers(0, 5)),
})


@settings(max_examples=60, deadline=None)
@given(whens=st.lists(st.tuples(WHENS, st.integers(0, 3)), max_size=8),
       label=st.sampled_from(LABELS), composite=st.sampled_from([(), ("chat", "math")]),
       text=st.sampled_from(["", "x", "xy", "zzzz yyyy"]))
def test_the_index_picks_what_a_full_scan_picks(whens, label, composite, text):
    """Invariant: the indexed match equals the best (priority, id) entry whose every
    condition holds, found by scanning all of them; none: the built-in."""
    entries = [entry(f"s{i}", p, **w) for i, (w, p) in enumerate(whens)]
    s = BUILTIN.replaced(entries)
    intent = Intent(label, 0.5, composite=composite)
    req = request(text)
    labels = {label, *composite}

    def holds(e: Entry) -> bool:
        when = e.spec.when
        return (not when.intents or bool(labels & set(when.intents))) and \
            e.trigger.holds(Facts(req, intent, {}))

    best = min((e for e in entries if holds(e)), key=lambda e: e.order, default=s.builtin)
    assert s.select(req, intent) is best


def test_two_hundred_keyword_strategies_each_match_only_their_words():
    words = [f"kw{i:03d}x" for i in range(200)]
    s = BUILTIN.replaced([entry(f"s{i:03d}", keywords=[w, f"ALT{i:03d}Y"])
                          for i, w in enumerate(words)])
    for i in (0, 57, 199):
        assert s.select(request(f"please look at {words[i].upper()} now"), CHAT).header \
            == f"s{i:03d}@1"
        assert s.select(request(f"inside-alt{i:03d}y-word"), CHAT).header == f"s{i:03d}@1"
    assert s.select(request("kw20x kw2000x nothing here " * 1000), CHAT).header \
        == "builtin-single@0"
