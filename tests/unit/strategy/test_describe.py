"""GET /debug/route shows the matched strategy's own multi-step plan (each kind's
``describe()``), and sends nothing (scripted upstreams on loopback, httpx.ASGITransport)."""

from __future__ import annotations

import textwrap

import pytest

from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream
from llmroute.strategy.cascade import CascadeSpec, CascadeStrategy, build_cascade
from llmroute.strategy.protocol import KindContext
from llmroute.types import Backend, Intent

FILES = {
    "pipe.yaml": """\
        strategy_id: pipe
        version: 2
        when: {keywords: [kwpipe]}
        kind: pipeline
        steps:
          - {name: extract, pool: errors, prompt: "Facts of {{ request.last_user }}",
             json_schema: {type: object}, timeout_s: 5}
          - {name: answer, pool: general, prompt: "Use {{ steps.extract.output }}"}
        """,
    "casc.yaml": """\
        strategy_id: casc
        version: 1
        when: {keywords: [kwcasc]}
        kind: cascade
        pools: [general, errors]
        escalate: {mean_logprob_below: -2}
        downgrade_below: 1.0
        """,
    "fuse.yaml": """\
        strategy_id: fuse
        version: 1
        when: {keywords: [kwfuse]}
        kind: fusion
        voters: [{pool: general}, {pool: errors, weight: 2}]
        quorum: 1
        deadline_s: 9
        """,
    "check.yaml": """\
        strategy_id: check
        version: 1
        when: {keywords: [kwcheck]}
        kind: verify
        pool: general
        check: {judge: {pool: errors, min_score: 0.5}}
        on_failure: regenerate
        regenerate_pool: errors
        """,
    "person.yaml": """\
        strategy_id: person
        version: 1
        when: {keywords: [kwhuman]}
        kind: human
        message: "A person will answer ({ticket})."
        """,
    "arm-a.yaml": """\
        strategy_id: arm-a
        version: 1
        priority: -5
        when: {keywords: [never-alone-a]}
        kind: single
        pool: general
        """,
    "arm-b.yaml": """\
        strategy_id: arm-b
        version: 1
        priority: -5
        when: {keywords: [never-alone-b]}
        kind: single
        pool: errors
        """,
    "ab.yaml": """\
        strategy_id: ab
        version: 3
        when: {keywords: [kwsplit]}
        kind: split
        arms: [{strategy: arm-a, weight: 3}, {strategy: arm-b, weight: 1}]
        """,
    "shade.yaml": """\
        strategy_id: shade
        version: 1
        when: {keywords: [kwshadow]}
        kind: shadow
        primary: arm-a
        candidate: arm-b
        max_in_flight: 2
        """,
}


@pytest.fixture
def folder(tmp_path):
    for name, text in FILES.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


async def _routes(folder, queries, headers=None):
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": a.base_url},
                           {"id": "b", "pool": "errors", "base_url": b.base_url}],
                          gate={"kind": "rules"},
                          strategies={"dir": str(folder), "watch": False})
        async with open_router(cfg) as (_, client):
            out = [(await client.get("/debug/route", params={"query": q},
                                     headers=headers or {})).json() for q in queries]
        assert a.requests == [] and b.requests == []
    return out


async def test_each_kind_shows_its_plan(folder):
    pipe, casc, fuse, check, person, plain = await _routes(folder, [
        "kwpipe this", "kwcasc this", "kwfuse this", "kwcheck this", "kwhuman this", "hi"])
    assert pipe["detail"] == {"kind": "pipeline", "steps": [
        {"name": "extract", "pool": "errors", "reads": ["request"], "schema": True,
         "timeout_s": 5.0, "max_tokens": None},
        {"name": "answer", "pool": "general", "reads": ["extract"], "schema": False,
         "timeout_s": 60.0, "max_tokens": None}]}
    assert casc["detail"]["pools"] == ["general", "errors"]
    assert casc["detail"]["escalate"] == {"complexity_above": None,
                                          "mean_logprob_below": -2.0, "on_error": True,
                                          "win_probability_at_least": None,
                                          "win_rank_at_least": None}
    assert casc["detail"]["wins"] == []
    assert casc["detail"]["downgrade_below"] == 1.0
    start, reasons = casc["detail"]["start"], casc["detail"]["reasons"]
    assert (start, len(reasons)) in {("general", 0), ("errors", 1)}
    assert all(r.startswith("pool general: ") for r in reasons)
    assert fuse["detail"] == {"kind": "fusion", "voters": [
        {"pool": "general", "weight": 1.0}, {"pool": "errors", "weight": 2.0}],
        "combine": "vote", "quorum": 1, "deadline_s": 9.0, "judge": None, "schema": None}
    assert check["detail"] == {"kind": "verify", "pool": "general", "check": {
        "by": "judge", "pool": "errors", "min_score": 0.5}, "on_failure": "regenerate",
        "regenerate_pool": "errors", "on_verifier_error": "fail", "stream": "hold"}
    assert person["detail"] == {"kind": "human", "message": "A person will answer ({ticket}).",
                                "queue": True}
    assert plain["strategy"]["header"] == "builtin-single@0"
    assert plain["detail"]["kind"] == "single" and plain["detail"]["pool"] is None
    assert all(r["trial"] is None for r in (pipe, casc, fuse, check, person, plain))


async def test_a_split_shows_its_arms_and_says_a_debug_query_has_no_sticky_key(folder):
    (split,) = await _routes(folder, ["kwsplit this"])
    trial = split["trial"]
    assert trial["kind"] == "split" and trial["header"] == "ab@3"
    assert trial["arms"] == [{"strategy": "arm-a", "weight": 3.0, "share": 0.75},
                             {"strategy": "arm-b", "weight": 1.0, "share": 0.25}]
    assert trial["arm"] in {"arm-a", "arm-b"} and trial["arm"] == split["strategy"]["strategy_id"]
    assert trial["sticky"] is None and "no sticky key" in trial["note"]
    assert split["detail"]["kind"] == "single"


async def test_a_split_with_a_client_address_is_sticky(folder):
    first, again = await _routes(folder, ["kwsplit this", "kwsplit that"],
                                 headers={"x-forwarded-for": "10.0.0.7"})
    assert first["trial"]["sticky"] == again["trial"]["sticky"] == "addr:10.0.0.7"
    assert "note" not in first["trial"]
    assert first["trial"]["arm"] == again["trial"]["arm"]


async def test_a_shadow_shows_its_candidate(folder):
    (shadow,) = await _routes(folder, ["kwshadow this"])
    assert shadow["strategy"]["header"] == "arm-a@1"
    assert {k: shadow["trial"][k] for k in ("kind", "primary", "candidate", "max_in_flight",
                                            "arm")} == \
        {"kind": "shadow", "primary": "arm-a", "candidate": "arm-b", "max_in_flight": 2,
         "arm": "arm-a"}


def _cascade(**fields) -> CascadeStrategy:
    spec = CascadeSpec(strategy_id="c", version=1, kind="cascade",
                       pools=("cheap", "mid", "strong"), **fields)
    backends = {p: Backend(id=p, pool=p, model=p, base_url="http://127.0.0.1:9",
                           engine="llamacpp", context_length=4096)
                for p in ("cheap", "mid", "strong")}
    return build_cascade(spec, KindContext(backends, {}, "cheap", 3))


@pytest.mark.parametrize(("fields", "complexity", "scores", "start"), [
    ({}, 4.0, {}, "cheap"),
    ({"escalate": {"complexity_above": 2.0}}, 4.0, {}, "mid"),
    ({"escalate": {"complexity_above": 2.0}}, 1.0, {}, "cheap"),
    ({"downgrade_below": 0.3}, 1.0, {"cheap": 0.2, "mid": 0.5}, "mid"),
    ({"downgrade_below": 0.3}, 1.0, {"cheap": None, "mid": 0.1}, "strong"),
    ({"downgrade_below": 0.3}, 1.0, {"cheap": 0.3}, "cheap"),
])
def test_the_cascade_start_follows_complexity_and_anchor_scores(fields, complexity, scores,
                                                                 start):
    cascade = _cascade(**fields)
    view = cascade.describe(None, Intent("x", 1.0, complexity=complexity),
                            lambda request, pool: scores.get(pool))
    assert view["start"] == start
    assert len(view["reasons"]) == ["cheap", "mid", "strong"].index(start)
