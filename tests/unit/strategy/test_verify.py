"""The verify kind through the app over scripted upstreams on loopback: each check (JSON
Schema, judge, logprob), regeneration, the held stream, the one attempt budget, verifier
faults as OpenAI-shaped errors, and the loader's refusals."""

from __future__ import annotations

import json
import textwrap

import pytest

from fakes.router import open_router, strategy_config
from fakes.upstream import serve_upstream
from llmroute.errors import ConfigError

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "Give me a person as JSON"}]}
GOOD = '{"name": "Ada", "age": 36}'
SCHEMA = ('{"type": "object", "required": ["name", "age"], "properties": {"name": '
          '{"type": "string"}, "age": {"type": "integer", "minimum": 0}}}')


def verify_yaml(check: str, extra: str = "") -> str:
    return (f"strategy_id: checked\nversion: 3\nkind: verify\npool: general\n"
            f"check: {check}\n{extra}")


async def ask(ups, tmp_path, yaml_text, body=BODY, **extra):
    folder = tmp_path / "s"
    folder.mkdir(exist_ok=True)
    (folder / "checked.yaml").write_text(yaml_text, encoding="utf-8")
    async with open_router(strategy_config(ups, folder, **extra)) as (_, client):
        return await client.post(CHAT, json=body)


def verdict(r):
    return r.headers.get("x-llmroute-verified"), r.json()["llmroute"]["verify"]


async def test_a_draft_satisfying_the_schema_is_verified(tmp_path):
    async with serve_upstream(["ok"], GOOD) as a, serve_upstream(["ok"], "x") as b:
        r = await ask({"general": [a], "strong": [b]}, tmp_path,
                      verify_yaml(f"{{json_schema: {SCHEMA}}}"))
    flag, note = verdict(r)
    assert (r.status_code, flag, note["verified"], note["pools"]) == (200, "true", True,
                                                                      ["general"])
    assert r.headers["x-llmroute-strategy"] == "checked@3"
    assert r.json()["choices"][0]["message"]["content"] == GOOD
    assert len(a.requests) == 1 and a.requests[0]["stream"] is False and b.requests == []


@pytest.mark.parametrize("reply,reason", [
    ('{"name": "Ada"}', "'age' is a required property"),
    ('{"name": "Ada", "age": -1}', "age: -1 is less than the minimum"),
    ("Ada, 36", "not JSON"),
], ids=["missing-field", "out-of-range", "not-json"])
async def test_a_failing_draft_is_returned_flagged(tmp_path, reply, reason):
    async with serve_upstream(["ok"], reply) as a, serve_upstream(["ok"], GOOD) as b:
        r = await ask({"general": [a], "strong": [b]}, tmp_path,
                      verify_yaml(f"{{json_schema: {SCHEMA}}}"))
    flag, note = verdict(r)
    assert (flag, note["verified"]) == ("false", False) and reason in note["reason"]
    assert r.json()["choices"][0]["message"]["content"] == reply and b.requests == []


async def test_a_failing_draft_is_regenerated_on_another_pool(tmp_path):
    async with serve_upstream(["ok"], "no json here") as a, serve_upstream(["ok"], GOOD) as b:
        r = await ask({"general": [a], "strong": [b]}, tmp_path, verify_yaml(
            f"{{json_schema: {SCHEMA}}}", "on_failure: regenerate\nregenerate_pool: strong\n"))
    flag, note = verdict(r)
    assert (flag, note["pools"], r.headers["x-llmroute-pool"]) == \
        ("true", ["general", "strong"], "strong")
    assert r.json()["choices"][0]["message"]["content"] == GOOD
    assert len(a.requests) == len(b.requests) == 1


async def test_a_fenced_json_answer_is_read_inside_its_fence(tmp_path):
    async with serve_upstream(["ok"], f"```json\n{GOOD}\n```") as a:
        r = await ask({"general": [a]}, tmp_path, verify_yaml(f"{{json_schema: {SCHEMA}}}"))
    assert verdict(r)[0] == "true"


async def test_the_request_schema_is_used_and_a_bad_one_is_a_400(tmp_path):
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": json.loads(SCHEMA)}}
    bad = {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": 7}}}
    async with serve_upstream(["ok"], '{"name": "Ada"}') as a:
        r = await ask({"general": [a]}, tmp_path, verify_yaml("{json_schema: request}"),
                      {**BODY, "response_format": fmt})
        r_bad = await ask({"general": [a]}, tmp_path, verify_yaml("{json_schema: request}"),
                          {**BODY, "response_format": bad})
    assert verdict(r)[0] == "false" and "'age' is a required" in verdict(r)[1]["reason"]
    assert r_bad.status_code == 400
    assert r_bad.json()["error"]["param"] == "response_format.json_schema.schema"


@pytest.mark.parametrize("judge,flag", [("PASS", "true"), ("fail - the answer is wrong", "false"),
                                        ("Verdict: PASS, score: 0.4", "false")],
                         ids=["pass", "fail", "pass-under-min-score"])
async def test_a_judge_pool_passes_or_fails_the_draft(tmp_path, judge, flag):
    async with serve_upstream(["ok"], "Paris") as a, serve_upstream(["ok"], judge) as j:
        r = await ask({"general": [a], "judge": [j]}, tmp_path,
                      verify_yaml("{judge: {pool: judge, min_score: 0.5}}"))
    assert verdict(r)[0] == flag and r.json()["choices"][0]["message"]["content"] == "Paris"
    prompt = j.requests[0]["messages"][0]["content"]
    assert "Give me a person as JSON" in prompt and "Paris" in prompt
    assert j.requests[0]["max_tokens"] > 0 and j.requests[0]["stream"] is False


async def test_a_judge_answering_nonsense_is_a_clear_error_or_the_draft(tmp_path):
    async with serve_upstream(["ok"], "Paris") as a, serve_upstream(["ok"], "banana") as j:
        failed = await ask({"general": [a], "judge": [j]}, tmp_path,
                           verify_yaml("{judge: {pool: judge}}"))
        kept = await ask({"general": [a], "judge": [j]}, tmp_path, verify_yaml(
            "{judge: {pool: judge}}", "on_verifier_error: return_draft\n"))
    assert failed.status_code == 502
    assert "neither PASS nor FAIL" in failed.json()["error"]["message"]
    assert kept.status_code == 200 and kept.headers["x-llmroute-verified"] == "error"
    assert kept.json()["choices"][0]["message"]["content"] == "Paris"


async def test_a_judge_pool_that_errors_is_a_503_naming_the_verifier(tmp_path):
    async with serve_upstream(["ok"], "Paris") as a, serve_upstream([("status", 500)]) as j:
        r = await ask({"general": [a], "judge": [j]}, tmp_path,
                      verify_yaml("{judge: {pool: judge}}"))
    err = r.json()["error"]
    assert r.status_code == 503 and "verifier (pool judge) failed" in err["message"]


@pytest.mark.parametrize("step,flag", [("ok", "true"), (("entropic", 0), "false")],
                         ids=["confident", "unsure"])
async def test_the_mean_logprob_decides_and_is_not_leaked(tmp_path, step, flag):
    async with serve_upstream([step], "one two three") as a:
        r = await ask({"general": [a]}, tmp_path, verify_yaml("{logprob: {min_mean: -1.0}}"))
    assert verdict(r)[0] == flag and a.requests[0]["logprobs"] is True
    assert "logprobs" not in r.json()["choices"][0]


async def test_a_streamed_request_is_held_until_verified(tmp_path):
    async with serve_upstream(["ok"], GOOD) as a:
        r = await ask({"general": [a]}, tmp_path, verify_yaml(f"{{json_schema: {SCHEMA}}}"),
                      {**BODY, "stream": True, "stream_options": {"include_usage": True}})
    lines = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")]
    chunks = [json.loads(x) for x in lines[:-1]]
    assert lines[-1] == "[DONE]" and r.headers["x-llmroute-verified"] == "true"
    assert chunks[0]["choices"][0]["delta"]["content"] == GOOD
    assert chunks[1]["llmroute"]["verify"]["verified"] is True
    assert chunks[2]["usage"]["completion_tokens"] == 5
    assert a.requests[0]["stream"] is False and "stream_options" not in a.requests[0]


async def test_one_attempt_budget_covers_every_leg(tmp_path):
    regen = "on_failure: regenerate\nregenerate_pool: strong\n"
    async with serve_upstream(["ok"], "nope") as a, serve_upstream(["ok"], GOOD) as b, \
            serve_upstream(["ok"], "PASS") as j:
        r = await ask({"general": [a], "strong": [b]}, tmp_path,
                      verify_yaml(f"{{json_schema: {SCHEMA}}}", regen), retry={"max_attempts": 1})
        judged = await ask({"general": [a], "judge": [j]}, tmp_path,
                           verify_yaml("{judge: {pool: judge}}"), retry={"max_attempts": 1})
    flag, note = verdict(r)
    assert flag == "false" and "attempt budget is spent" in note["reason"]
    assert b.requests == [] and j.requests == []
    assert judged.status_code == 503 and "budget" in judged.json()["error"]["message"]


async def test_a_draft_pool_failing_over_spends_the_budget(tmp_path):
    regen = "on_failure: regenerate\nregenerate_pool: strong\n"
    async with serve_upstream([("status", 500)]) as a0, serve_upstream(["ok"], "nope") as a1, \
            serve_upstream(["ok"], GOOD) as b:
        r = await ask({"general": [a0, a1], "strong": [b]}, tmp_path,
                      verify_yaml(f"{{json_schema: {SCHEMA}}}", regen),
                      retry={"max_attempts": 2, "backoff_base_s": 0.001})
    assert r.headers["x-llmroute-verified"] == "false" and b.requests == []
    assert len(a0.requests) + len(a1.requests) == 2


async def test_a_dead_draft_pool_is_an_openai_shaped_502(tmp_path):
    async with serve_upstream([("status", 500)]) as a:
        r = await ask({"general": [a]}, tmp_path, verify_yaml(f"{{json_schema: {SCHEMA}}}"))
    assert r.status_code == 502 and set(r.json()["error"]) >= {"message", "type", "code"}


@pytest.mark.parametrize("check,extra,where", [
    ("{judge: {pool: nowhere}}", "", ":5: check.judge.pool: unknown pool 'nowhere'"),
    ("{json_schema: {type: 7}}", "", ":5: check.json_schema: Value error, the JSON Schema does not compile"),
    ("{judge: {pool: general, prompt: '{{ secrets }}'}}", "", "may use only draft, request"),
    ("{judge: {pool: general, prompt: '{{ draft '}}", "", "template syntax error"),
    ("{json_schema: request}", "on_failure: regenerate\n", "needs a regenerate_pool"),
    ("{json_schema: request, logprob: {min_mean: -1}}", "", "exactly one of"),
    ("{logprob: {min_mean: 2}}", "", "check.logprob.min_mean"),
    ("{json_schema: request}", "stream: optimistic\n", ":6: stream"),
], ids=["unknown-judge-pool", "bad-schema", "template-name", "template-syntax",
        "regenerate-nowhere", "two-checks", "positive-logprob", "optimistic-stream"])
def test_bad_verify_files_are_refused_with_file_line_field(loader, write, check, extra, where):
    path = write("v.yaml", verify_yaml(check, extra))
    with pytest.raises(ConfigError) as err:
        loader.read(path)
    assert f"{path}" in err.value.message and where in err.value.message


def test_a_good_verify_file_loads_and_names_its_pools(loader, write):
    path = write("v.yaml", textwrap.dedent("""\
        strategy_id: v
        version: 1
        kind: verify
        pool: general
        check: {judge: {pool: code}}
        on_failure: regenerate
        regenerate_pool: long
        """))
    entry = loader.read(path)
    assert entry.runner is not None and entry.spec.pool_refs() == [
        (("pool",), "general"), (("regenerate_pool",), "long"),
        (("check", "judge", "pool"), "code")]


async def test_the_logged_answer_of_a_strategy_is_the_filtered_one(tmp_path):
    from structlog.testing import capture_logs
    words = tmp_path / "words.txt"
    words.write_text("Ada\n", encoding="utf-8")
    masking = {"lists": [{"name": "names", "path": str(words), "action": "mask"}]}
    async with serve_upstream(["ok"], GOOD) as a, serve_upstream(["ok"], GOOD) as b:
        with capture_logs() as logs:
            r = await ask({"general": [a], "strong": [b]}, tmp_path,
                          verify_yaml(f"{{json_schema: {SCHEMA}}}"),
                          content_filter=masking, observe={"log_prompts": True})
    sent = r.json()["choices"][0]["message"]["content"]
    assert "Ada" not in sent
    line = next(e for e in logs if e["event"] == "request")
    assert line["answer"] == sent
