"""The fusion kind over scripted upstreams on loopback: the weighted vote, the field-level
JSON vote, the judge, the deadline, the quorum and its fallback, the budget, streaming, and
the loader's refusals."""

from __future__ import annotations

import json
import time

import pytest

from fakes.router import open_router, strategy_config
from fakes.upstream import serve_upstream
from llmroute.errors import ConfigError

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "Capital of France?"}]}
POOLS = ("a", "b", "c")


def fusion_yaml(weights=(1, 1, 1), extra: str = "", version: int = 2) -> str:
    voters = ", ".join(f"{{pool: {p}, weight: {w}}}" for p, w in zip(POOLS, weights))
    return (f"strategy_id: council\nversion: {version}\nkind: fusion\nvoters: [{voters}]\n"
            f"{extra}")


async def ask(ups, tmp_path, yaml_text, body=BODY, files=(), **extra):
    folder = tmp_path / "s"
    folder.mkdir(exist_ok=True)
    (folder / "council.yaml").write_text(yaml_text, encoding="utf-8")
    for name, text in files:
        (folder / name).write_text(text, encoding="utf-8")
    async with open_router(strategy_config(ups, folder, **extra)) as (_, client):
        r = await client.post(CHAT, json=body)
        await r.aread()
        return r


def note(r):
    return r.json()["llmroute"]["fusion"]


def text(r):
    return r.json()["choices"][0]["message"]["content"]



async def test_the_weighted_majority_wins_and_says_who_voted(tmp_path):
    async with serve_upstream([("say", "Paris.")]) as a, \
            serve_upstream([("say", " paris")]) as b, \
            serve_upstream([("say", "London")]) as c:
        ups = {"a": [a], "b": [b], "c": [c]}
        r = await ask(ups, tmp_path, fusion_yaml((1, 1, 1.5)))
        heavy = await ask(ups, tmp_path, fusion_yaml((1, 1, 3), version=3))
    assert r.status_code == 200 and r.headers["x-llmroute-strategy"] == "council@2"
    assert text(r) == "Paris." and note(r)["winner"]["pool"] == "a"
    assert r.headers["x-llmroute-fusion"] == "a,b,c" and note(r)["pools"] == ["a", "b", "c"]
    voters = note(r)["voters"]
    assert [v["weight"] for v in voters] == [1, 1, 1.5]
    assert all(v["status"] == "voted" and 0.98 < v["confidence"] <= 1 for v in voters)
    assert r.json()["usage"] == {"prompt_tokens": 15, "completion_tokens": 15,
                                 "total_tokens": 30}
    assert "logprobs" not in r.json()["choices"][0]
    assert all(up.requests[0]["logprobs"] is True for up in (a, b, c))
    assert text(heavy) == "London" and heavy.headers["x-llmroute-pool"] == "c"


async def test_a_slow_voter_is_cut_at_the_deadline(tmp_path):
    async with serve_upstream([("say", "4")]) as a, serve_upstream([("say", "4")]) as b, \
            serve_upstream([("hang", 5)], "5") as c:
        t0 = time.monotonic()
        r = await ask({"a": [a], "b": [b], "c": [c]}, tmp_path,
                      fusion_yaml(extra="deadline_s: 0.4\n"))
        took = time.monotonic() - t0
    assert r.status_code == 200 and text(r) == "4" and took < 3
    assert [v["status"] for v in note(r)["voters"]] == ["voted", "voted", "late"]
    assert r.headers["x-llmroute-fusion"] == "a,b"


async def test_below_quorum_is_an_openai_503_or_the_fallback(tmp_path):
    fallback = "strategy_id: plain\nversion: 1\nkind: single\npool: b\nwhen: {model: [x]}\n"
    async with serve_upstream([("status", 500)]) as a, serve_upstream([("say", "B")]) as b, \
            serve_upstream([("hang", 5)]) as c:
        ups = {"a": [a], "b": [b], "c": [c]}
        r = await ask(ups, tmp_path, fusion_yaml(extra="deadline_s: 0.3\n"))
        saved = await ask(ups, tmp_path, fusion_yaml(
            extra="deadline_s: 0.3\nfallback_strategy: plain\n"), files=[("plain.yaml",
                                                                         fallback)])
    assert r.status_code == 503 and r.json()["error"]["code"] == "fusion_quorum"
    assert set(r.json()["error"]) >= {"message", "type", "code"}
    assert "below its quorum of 2" in r.json()["error"]["message"]
    assert saved.status_code == 200 and saved.headers["x-llmroute-strategy"] == "plain@1"
    assert saved.headers["x-llmroute-fallback-from"] == "council@2"


async def test_each_voter_gets_its_first_attempt_and_retries_are_shared(tmp_path):
    async with serve_upstream([("status", 500)]) as a0, \
            serve_upstream([("status", 500)]) as a1, \
            serve_upstream([("status", 500)]) as a2, \
            serve_upstream([("say", "yes")]) as b, serve_upstream([("say", "yes")]) as c:
        r = await ask({"a": [a0, a1, a2], "b": [b], "c": [c]}, tmp_path, fusion_yaml(),
                      retry={"max_attempts": 2})
    # budget: 2 attempts + one first attempt per further voter = 4; a gets 2 of them
    assert r.status_code == 200 and text(r) == "yes"
    assert len(a0.requests) + len(a1.requests) + len(a2.requests) == 2
    assert (len(b.requests), len(c.requests)) == (1, 1)
    assert note(r)["voters"][0]["status"].startswith("failed")


SCHEMA = ('json_schema: {type: object, required: [city, pop], properties: '
          '{city: {type: string}, pop: {type: integer}}}\n')


async def test_json_answers_are_voted_field_by_field_and_invalid_ones_dropped(tmp_path):
    async with serve_upstream([("say", '{"city": "Paris", "pop": 2}')]) as a, \
            serve_upstream([("say", '```json\n{"city": "Paris", "pop": 3}\n```')]) as b, \
            serve_upstream([("say", '{"city": "Rome", "pop": "many"}')]) as c:
        r = await ask({"a": [a], "b": [b], "c": [c]}, tmp_path,
                      fusion_yaml((1, 2, 50), "combine: json\n" + SCHEMA))
    assert r.status_code == 200 and json.loads(text(r)) == {"city": "Paris", "pop": 3}
    statuses = [v["status"] for v in note(r)["voters"]]
    assert statuses[:2] == ["voted", "voted"] and statuses[2].startswith("invalid: schema")
    assert note(r)["pools"] == ["a", "b"]


async def test_all_invalid_json_falls_below_quorum(tmp_path):
    async with serve_upstream([("say", "nope")]) as a, serve_upstream([("say", "[]")]) as b, \
            serve_upstream([("say", '{"city": 1}')]) as c:
        r = await ask({"a": [a], "b": [b], "c": [c]}, tmp_path,
                      fusion_yaml(extra="combine: json\n" + SCHEMA))
    assert r.status_code == 503 and "invalid" in r.json()["error"]["message"]


JUDGE = "combine: judge\njudge: {pool: j}\n"


async def test_the_judge_picks_a_candidate_and_nonsense_is_a_502(tmp_path):
    async with serve_upstream([("say", "Short.")]) as a, \
            serve_upstream([("say", "A long and careful answer.")]) as b, \
            serve_upstream([("say", "Meh.")]) as c, serve_upstream([("say", "2")]) as j, \
            serve_upstream([("say", "banana")]) as bad:
        r = await ask({"a": [a], "b": [b], "c": [c], "j": [j]}, tmp_path, fusion_yaml(
            extra=JUDGE))
        odd = await ask({"a": [a], "b": [b], "c": [c], "j": [bad]}, tmp_path,
                        fusion_yaml(extra=JUDGE))
    assert r.status_code == 200 and text(r) == "A long and careful answer."
    assert note(r)["judge"]["pick"] == 2 and note(r)["combine"] == "judge"
    assert "[2] A long and careful answer." in j.requests[0]["messages"][0]["content"]
    assert "logprobs" not in a.requests[0]
    assert r.json()["usage"]["total_tokens"] == 40
    assert odd.status_code == 502 and odd.json()["error"]["code"] == "fusion_judge_nonsense"


async def test_a_streamed_request_gets_the_fused_answer_replayed(tmp_path):
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    async with serve_upstream([("say", "Paris")]) as a, serve_upstream([("say", "Paris")]) as b, \
            serve_upstream([("say", "Rome")]) as c:
        r = await ask({"a": [a], "b": [b], "c": [c]}, tmp_path, fusion_yaml(), body=body)
    events = [json.loads(line[6:]) for line in r.text.splitlines()
              if line.startswith("data: {")]
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")
    assert events[0]["choices"][0]["delta"]["content"] == "Paris"
    assert events[1]["llmroute"]["fusion"]["pools"] == ["a", "b", "c"]
    assert events[-1]["usage"]["total_tokens"] == 30
    assert all(up.requests[0]["stream"] is False for up in (a, b, c))


@pytest.mark.parametrize("extra, field", [
    ("combine: judge\n", "voters"),
    ("judge: {pool: a}\n", "voters"),
    ("quorum: 4\n", "voters"),
    ("json_schema: {type: object}\n", "voters"),
    ("combine: json\njson_schema: {type: 12}\n", "json_schema"),
    ("combine: judge\njudge: {pool: a, prompt: '{{ nope }}'}\n", "prompt"),
])
def test_the_loader_refuses_an_inconsistent_fusion(loader, write, extra, field):
    path = write("council.yaml", fusion_yaml(extra=extra).replace("pool: c", "pool: code")
                 .replace("pool: a", "pool: general").replace("pool: b", "pool: long"))
    with pytest.raises(ConfigError) as exc:
        loader.read(path)
    assert "council.yaml" in str(exc.value)


def test_the_loader_refuses_an_unknown_voter_pool(loader, write):
    path = write("council.yaml", fusion_yaml())
    with pytest.raises(ConfigError, match="voters"):
        loader.read(path)
