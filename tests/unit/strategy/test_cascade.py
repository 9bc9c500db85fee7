"""The cascade kind: the starting pool decided up front (complexity, anchor score), the
draft escalated on its mean logprob or its failure (scripted upstreams on loopback),
mid-stream escalation through the fuse's handoff, the budget, and the loader's refusals."""

from __future__ import annotations

import json

import pytest

from fakes.router import make_config, open_router, strategy_config
from fakes.upstream import serve_upstream
from llmroute.errors import ConfigError
from llmroute.observe.trace import Recorder
from llmroute.strategy.cascade import CascadeSpec, build_cascade
from llmroute.strategy.protocol import KindContext, Run
from llmroute.types import Backend, ChatRequest, Intent

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "What is a monad?"}]}
CHEAP = "The quick brown fox jumps over"
STRONG = " the lazy dog."


def cascade_yaml(extra: str = "") -> str:
    return f"strategy_id: climb\nversion: 4\nkind: cascade\npools: [cheap, strong]\n{extra}"


async def ask(ups, tmp_path, yaml_text, body=BODY, **extra):
    folder = tmp_path / "s"
    folder.mkdir(exist_ok=True)
    (folder / "climb.yaml").write_text(yaml_text, encoding="utf-8")
    async with open_router(strategy_config(ups, folder, **extra)) as (_, client):
        r = await client.post(CHAT, json=body)
        await r.aread()
        return r


def note(r):
    return r.json()["llmroute"]["cascade"]


async def test_a_confident_draft_is_the_answer_and_logprobs_are_not_leaked(tmp_path):
    async with serve_upstream(["ok"], CHEAP) as a, serve_upstream(["ok"], STRONG) as b:
        r = await ask({"cheap": [a], "strong": [b]}, tmp_path,
                      cascade_yaml("escalate: {mean_logprob_below: -1.0}\n"))
    assert r.status_code == 200 and r.headers["x-llmroute-strategy"] == "climb@4"
    assert (r.headers["x-llmroute-cascade"], note(r)["escalated"]) == ("cheap", False)
    assert r.json()["choices"][0]["message"]["content"] == CHEAP
    assert "logprobs" not in r.json()["choices"][0] and a.requests[0]["logprobs"] is True
    assert b.requests == []


async def test_an_unsure_draft_escalates_to_the_stronger_pool_and_usage_sums(tmp_path):
    async with serve_upstream([("entropic", 0)], CHEAP) as a, \
            serve_upstream(["ok"], STRONG) as b:
        r = await ask({"cheap": [a], "strong": [b]}, tmp_path,
                      cascade_yaml("escalate: {mean_logprob_below: -1.0}\n"))
    assert r.headers["x-llmroute-cascade"] == "cheap>strong"
    assert r.headers["x-llmroute-pool"] == "strong"
    assert r.json()["choices"][0]["message"]["content"] == STRONG
    assert note(r)["escalated"] is True and "draft mean logprob" in note(r)["reasons"][0]
    assert r.json()["usage"] == {"prompt_tokens": 10, "completion_tokens": 10,
                                 "total_tokens": 20}
    assert b.requests[0]["messages"] == BODY["messages"] and "logprobs" not in b.requests[0]


async def test_a_failing_draft_pool_escalates_unless_told_not_to(tmp_path):
    async with serve_upstream([("status", 500)]) as a, serve_upstream(["ok"], STRONG) as b:
        r = await ask({"cheap": [a], "strong": [b]}, tmp_path, cascade_yaml())
        off = await ask({"cheap": [a], "strong": [b]}, tmp_path,
                        cascade_yaml("escalate: {on_error: false}\n"))
    assert r.status_code == 200 and "draft failed" in note(r)["reasons"][0]
    assert off.status_code == 502 and set(off.json()["error"]) >= {"message", "type", "code"}
    assert len(b.requests) == 1


async def test_the_escalation_keeps_its_attempt_from_the_drafts_failover(tmp_path):
    async with serve_upstream([("status", 500)]) as a0, serve_upstream([("status", 500)]) as a1, \
            serve_upstream(["ok"], STRONG) as b:
        r = await ask({"cheap": [a0, a1], "strong": [b]}, tmp_path, cascade_yaml(),
                      retry={"max_attempts": 1})
    assert r.status_code == 200 and r.headers["x-llmroute-pool"] == "strong"
    assert len(a0.requests) + len(a1.requests) == 1


async def test_a_stream_escalates_mid_answer_through_the_fuse_handoff(tmp_path):
    body = {**BODY, "stream": True}
    async with serve_upstream([("entropic", 1)], CHEAP) as a, \
            serve_upstream(["ok"], STRONG) as b:
        r = await ask({"cheap": [a], "strong": [b]}, tmp_path, cascade_yaml(), body)
    lines = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
    chunks = [json.loads(x) for x in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                   if c["choices"])
    assert lines[-1] == "[DONE]" and r.headers["x-llmroute-cascade"] == "cheap"
    assert text == "The quick brown" + STRONG  # the stronger model continued the text
    handoffs = chunks[-1]["llmroute"]["handoffs"]
    assert [(h["from"], h["to"], h["reason"]) for h in handoffs] == \
        [("cheap-0", "strong-0", "entropy")]
    continued = next(body for body in b.requests if body["stream"])  # after any warm-ups
    assert continued["messages"][-1] == {"role": "assistant", "content": "The quick brown"}


async def test_a_pool_no_backend_of_which_fits_is_downgraded_up_front(tmp_path):
    long_prompt = {**BODY, "messages": [{"role": "user", "content": "word " * 400}]}
    async with serve_upstream(["ok"], CHEAP) as a, serve_upstream(["ok"], STRONG) as b:
        folder = tmp_path / "s"
        folder.mkdir()
        (folder / "climb.yaml").write_text(cascade_yaml("downgrade_below: 0.3\n"))
        cfg = make_config([  # the cheap engine's context is too small for the prompt
            {"id": "cheap-0", "pool": "cheap", "base_url": a.base_url, "context_length": 256},
            {"id": "strong-0", "pool": "strong", "base_url": b.base_url}],
            gate={"kind": "rules"}, strategies={"dir": str(folder), "watch": False})
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=long_prompt)
    assert r.status_code == 200 and r.headers["x-llmroute-cascade"] == "strong"
    assert "no backend passes" in note(r)["reasons"][0] and a.requests == []


BACKENDS = {b.id: b for b in [Backend("c1", "cheap", "vllm", "http://a", "small", 4096),
                              Backend("s1", "strong", "vllm", "http://b", "big", 4096)]}
REQUEST = ChatRequest("chat", dict(BODY), "auto", False, "What is a monad?", 5, None, "r")


class ScoredLegs:
    """Legs that only report a best anchor score per pool."""

    left = 3

    def __init__(self, scores):
        self.scores = scores

    def best_score(self, request, pool):
        return self.scores[pool]


@pytest.mark.parametrize("fields,complexity,scores,start,reason", [
    ({}, 4.0, {"cheap": 0.9}, 0, None),
    ({"escalate": {"complexity_above": 2.5}}, 4.0, {}, 1, "complexity 4 > 2.5"),
    ({"escalate": {"complexity_above": 2.5}}, 1.0, {}, 0, None),
    ({"downgrade_below": 0.3}, 1.0, {"cheap": 0.21}, 1, "best anchor score 0.210 < 0.3"),
    ({"downgrade_below": 0.3}, 1.0, {"cheap": 0.3}, 0, None),
], ids=["plain", "complex", "simple", "weak-pool", "pool-at-threshold"])
def test_the_starting_pool_is_decided_up_front(fields, complexity, scores, start, reason):
    spec = CascadeSpec.model_validate({"strategy_id": "c", "version": 1, "kind": "cascade",
                                       "pools": ["cheap", "strong"], **fields})
    strategy = build_cascade(spec, KindContext(BACKENDS, {}, "cheap", 3))
    intent = Intent("general", 0.9, complexity=complexity)
    run = Run(REQUEST, intent, ScoredLegs(scores), Recorder("r", "r"), 0.0)
    index, reasons = strategy.start(run)
    assert index == start and (reasons[0].endswith(reason) if reason else reasons == [])
    assert strategy.plan(REQUEST, intent).max_attempts == 4


@pytest.mark.parametrize("extra,where", [
    ("", ":4: pools.1: unknown pool 'nowhere'"),
], ids=["unknown-pool"])
def test_a_cascade_naming_an_unknown_pool_is_refused(loader, write, extra, where):
    path = write("c.yaml", cascade_yaml(extra).replace("strong", "nowhere")
                 .replace("[cheap,", "[general,"))
    with pytest.raises(ConfigError) as err:
        loader.read(path)
    assert str(path) in err.value.message and where in err.value.message


@pytest.mark.parametrize("pools,where", [
    ("[general]", "pools: Tuple should have at least 2 items"),
    ("[general, general]", "pools: Value error, a pool is listed twice: general"),
], ids=["one-pool", "twice"])
def test_bad_cascade_pools_are_refused(loader, write, pools, where):
    path = write("c.yaml", cascade_yaml().replace("[cheap, strong]", pools))
    with pytest.raises(ConfigError) as err:
        loader.read(path)
    assert f"{path}:4: {where}" in err.value.message
