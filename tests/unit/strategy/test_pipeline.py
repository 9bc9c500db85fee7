"""The pipeline kind through the app over scripted upstreams on loopback: templates over
earlier steps, the last step truly streamed, usage summed, schema retry, step timeout,
hops in the trace, the one attempt budget, the fallback strategy at run time, and the
loader's refusals."""

from __future__ import annotations

import json

import pytest

from fakes.router import open_router, strategy_config
from fakes.upstream import serve_upstream
from llmroute.errors import ConfigError

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "Tell me about Ada"}]}
GOOD = '{"name": "Ada", "age": 36}'
SCHEMA = ('{"type": "object", "required": ["name", "age"], "properties": {"name": '
          '{"type": "string"}, "age": {"type": "integer"}}}')
THREE = f"""strategy_id: chain
version: 2
kind: pipeline
steps:
  - name: extract
    pool: one
    prompt: "Extract facts: {{{{ request.last_user }}}}"
    json_schema: {SCHEMA}
  - name: plan
    pool: two
    prompt: "Plan for {{{{ steps.extract.json.name }}}} from {{{{ steps.extract.output }}}}"
  - name: answer
    pool: three
    prompt: "Answer using {{{{ steps.plan.output }}}}"
"""


async def ask(ups, tmp_path, files, body=BODY, rid="p1", **extra):
    folder = tmp_path / "s"
    folder.mkdir(exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    async with open_router(strategy_config(ups, folder, **extra)) as (_, client):
        r = await client.post(CHAT, json=body, headers={"x-request-id": rid})
        trace = (await client.get(f"/trace/{rid}")).json()
        await r.aread()
        return r, trace


def hops(trace):
    return [s for s in trace["steps"] if s["step"] == "pipeline_step"]


def sse(text):
    lines = [ln[6:] for ln in text.splitlines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


async def test_three_steps_chain_their_outputs_and_sum_usage(tmp_path):
    async with serve_upstream(["ok"], GOOD) as a, serve_upstream(["ok"], "a plan") as b, \
            serve_upstream(["ok"], "final words") as c:
        r, trace = await ask({"one": [a], "two": [b], "three": [c]}, tmp_path,
                             {"chain.yaml": THREE})
    assert r.status_code == 200 and r.headers["x-llmroute-strategy"] == "chain@2"
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "final words"
    assert body["usage"] == {"prompt_tokens": 15, "completion_tokens": 15, "total_tokens": 30}
    assert a.requests[0]["messages"][0]["content"] == "Extract facts: Tell me about Ada"
    assert b.requests[0]["messages"][0]["content"] == f"Plan for Ada from {GOOD}"
    assert c.requests[0]["messages"] == [{"role": "user", "content": "Answer using a plan"}]
    assert [h["step_name"] for h in body["llmroute"]["pipeline"]] == ["extract", "plan", "answer"]
    assert (r.headers["x-llmroute-pool"], r.headers["x-llmroute-steps"]) == \
        ("three", "extract,plan,answer")
    steps = hops(trace)
    assert [(h["hop_id"], h["input_ref"]) for h in steps] == [
        ("p1/extract", "request"), ("p1/plan", "p1/extract"), ("p1/answer", "p1/plan")]
    assert {h["trace_id"] for h in steps} == {"p1"} and steps[0]["output"] == GOOD
    assert GOOD not in json.dumps(body["choices"])


async def test_only_the_last_step_is_streamed_and_its_usage_chunk_sums_every_step(tmp_path):
    async with serve_upstream(["ok"], GOOD) as a, serve_upstream(["ok"], "a plan") as b, \
            serve_upstream(["ok"], "streamed final words") as c:
        r, trace = await ask({"one": [a], "two": [b], "three": [c]}, tmp_path,
                             {"chain.yaml": THREE},
                             {**BODY, "stream": True,
                              "stream_options": {"include_usage": True}})
    chunks = sse(r.text)
    text = "".join(ch["choices"][0]["delta"].get("content") or ""
                   for ch in chunks if ch["choices"])
    assert r.status_code == 200 and text == "streamed final words"
    assert a.requests[0]["stream"] is False and b.requests[0]["stream"] is False
    assert c.requests[0]["stream"] is True and len(chunks) > 3  # a true stream, word by word
    assert chunks[-1]["usage"] == {"prompt_tokens": 15, "completion_tokens": 13,
                                   "total_tokens": 28}
    assert GOOD not in r.text and "a plan" not in r.text
    assert [h["step_name"] for h in hops(trace)] == ["extract", "plan", "answer"]


async def test_a_validated_last_step_of_a_stream_is_asked_without_stream_options(tmp_path):
    checked = f"""strategy_id: chain
version: 2
kind: pipeline
steps:
  - name: plan
    pool: one
    prompt: "Plan for {{{{ request.last_user }}}}"
  - name: answer
    pool: two
    prompt: "Answer using {{{{ steps.plan.output }}}}"
    json_schema: {SCHEMA}
"""
    async with serve_upstream(["ok"], "a plan") as a, serve_upstream(["ok"], GOOD) as b:
        r, _ = await ask({"one": [a], "two": [b]}, tmp_path, {"chain.yaml": checked},
                         {**BODY, "stream": True, "stream_options": {"include_usage": True}})
    text = "".join(ch["choices"][0]["delta"].get("content") or ""
                   for ch in sse(r.text) if ch["choices"])
    assert r.status_code == 200 and text == GOOD
    # OpenAI refuses stream_options on a request that is not streamed
    assert b.requests[0]["stream"] is False and "stream_options" not in b.requests[0]
    assert a.requests[0]["stream"] is False and "stream_options" not in a.requests[0]


async def test_an_invalid_step_answer_is_retried_once_with_the_validation_error(tmp_path):
    async with serve_upstream([("say", "Ada is 36"), ("say", GOOD)]) as a, \
            serve_upstream(["ok"], "a plan") as b, serve_upstream(["ok"], "done") as c:
        r, trace = await ask({"one": [a], "two": [b], "three": [c]}, tmp_path,
                             {"chain.yaml": THREE})
    assert r.status_code == 200 and len(a.requests) == 2
    retry = a.requests[1]["messages"]
    assert retry[1] == {"role": "assistant", "content": "Ada is 36"}
    assert "not JSON" in retry[2]["content"]
    assert hops(trace)[0]["retry"] is True and "not JSON" in hops(trace)[0]["failed"]


async def test_a_step_failing_its_schema_twice_is_a_502_naming_the_step(tmp_path):
    async with serve_upstream([("say", '{"name": "Ada"}')]) as a, \
            serve_upstream(["ok"], "x") as b, serve_upstream(["ok"], "x") as c:
        r, trace = await ask({"one": [a], "two": [b], "three": [c]}, tmp_path,
                             {"chain.yaml": THREE})
    err = r.json()["error"]
    assert r.status_code == 502 and err["code"] == "step_schema_failed"
    assert "pipeline step 'extract' (pool one)" in err["message"]
    assert "'age' is a required property" in err["message"]
    assert b.requests == [] and c.requests == [] and len(a.requests) == 2
    assert "failed" in hops(trace)[-1] and hops(trace)[-1]["step_name"] == "extract"


async def test_a_slow_step_times_out_with_a_504_naming_it(tmp_path):
    slow = THREE.replace("  - name: plan\n    pool: two\n",
                         "  - name: plan\n    pool: two\n    timeout_s: 0.2\n")
    async with serve_upstream(["ok"], GOOD) as a, serve_upstream([("hang", 5)]) as b, \
            serve_upstream(["ok"], "x") as c:
        r, trace = await ask({"one": [a], "two": [b], "three": [c]}, tmp_path,
                             {"chain.yaml": slow})
    err = r.json()["error"]
    assert r.status_code == 504 and err["code"] == "step_timeout"
    assert "pipeline step 'plan' (pool two) failed" in err["message"] and c.requests == []
    assert hops(trace)[-1]["step_name"] == "plan" and "timeout_s" in hops(trace)[-1]["failed"]


async def test_one_budget_covers_every_step_and_its_retries(tmp_path):
    async with serve_upstream([("say", "nope")]) as a, serve_upstream(["ok"], "x") as b, \
            serve_upstream(["ok"], "x") as c:
        ok, _ = await ask({"one": [b], "two": [b], "three": [c]}, tmp_path,
                          {"chain.yaml": THREE.replace(f"    json_schema: {SCHEMA}\n", "")
                           .replace("{{ steps.extract.json.name }}", "Ada")},
                          retry={"max_attempts": 1})
        r, _ = await ask({"one": [a], "two": [b], "three": [c]}, tmp_path,
                         {"chain.yaml": THREE}, rid="p2", retry={"max_attempts": 1})
    assert ok.status_code == 200  # three steps, no retry: one first attempt each
    assert r.status_code == 503 and "budget is spent" in r.json()["error"]["message"]
    assert len(a.requests) == 1


FALLBACK = "strategy_id: safe\nversion: 1\nkind: single\npool: three\nwhen: {model: [none]}\n"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_failed_step_runs_the_fallback_strategy(tmp_path, stream):
    chain = THREE + "fallback_strategy: safe\n"
    body = {**BODY, "stream": stream}
    async with serve_upstream([("status", 500)]) as a, serve_upstream(["ok"], "x") as b, \
            serve_upstream(["ok"], "rescued answer") as c:
        r, trace = await ask({"one": [a], "two": [b], "three": [c]}, tmp_path,
                             {"chain.yaml": chain, "safe.yaml": FALLBACK}, body)
    assert r.status_code == 200 and "rescued" in r.text
    assert r.headers["x-llmroute-strategy"] == "safe@1"
    assert r.headers["x-llmroute-fallback-from"] == "chain@2"
    assert c.requests[0]["messages"] == BODY["messages"]  # the client's own request
    fell = [s for s in trace["steps"] if s["step"] == "fallback"]
    assert fell[0]["to"] == "safe@1" and "pipeline step 'extract'" in fell[0]["reason"]


async def test_a_verify_failure_runs_its_fallback_too(tmp_path):
    verify = ("strategy_id: checked\nversion: 1\nkind: verify\npool: one\n"
              "check: {judge: {pool: two}}\nfallback_strategy: builtin-single\n")
    async with serve_upstream(["ok"], "draft") as a, serve_upstream(["ok"], "banana") as b:
        r, _ = await ask({"one": [a], "two": [b]}, tmp_path, {"v.yaml": verify})
    assert r.status_code == 200 and r.headers["x-llmroute-strategy"] == "builtin-single@0"
    assert r.headers["x-llmroute-fallback-from"] == "checked@1"


async def test_a_client_error_never_falls_back_and_the_trace_names_the_step(tmp_path):
    chain = THREE + "fallback_strategy: safe\n"
    async with serve_upstream([("status", 400)]) as a, serve_upstream(["ok"], "x") as c:
        r, trace = await ask({"one": [a], "two": [c], "three": [c]}, tmp_path,
                             {"chain.yaml": chain, "safe.yaml": FALLBACK})
    assert r.status_code == 400 and set(r.json()["error"]) >= {"message", "type", "code"}
    assert c.requests == [] and hops(trace)[-1]["step_name"] == "extract"


async def test_a_template_reading_a_missing_json_field_fails_its_step(tmp_path):
    chain = THREE.replace("steps.extract.json.name", "steps.extract.json.nickname")
    async with serve_upstream(["ok"], GOOD) as a, serve_upstream(["ok"], "x") as c:
        r, _ = await ask({"one": [a], "two": [c], "three": [c]}, tmp_path,
                         {"chain.yaml": chain})
    err = r.json()["error"]
    assert r.status_code == 502 and err["code"] == "step_template_failed"
    assert "pipeline step 'plan'" in err["message"] and "nickname" in err["message"]


@pytest.mark.parametrize("edit,where", [
    (("pool: two", "pool: nowhere"), ":10: steps.1.pool: unknown pool 'nowhere'"),
    (("steps.plan.output", "steps.later.output"), ":14: steps.2.prompt: the template reads "
     "steps.later, which is no step"),
    (("Plan for {{ steps.extract.json.name }}", "{{ steps['answer'].output }}"),
     ":11: steps.1.prompt: the template reads steps.answer, which is a later step"),
    (('"integer"', "7"), ":8: steps.0.json_schema: Value error, the JSON Schema does not "
     "compile"),
    (("{{ request.last_user }}", "{{ secrets }}"), "steps.0.prompt: Value error, the "
     "template uses secrets"),
    (("name: plan", "name: extract"), ":9: steps.1.name: duplicate step 'extract'"),
    (("{{ steps.plan.output }}", "{{ steps.plan.output "), "template syntax error"),
], ids=["unknown-pool", "missing-step", "later-step", "bad-schema", "unknown-name",
        "duplicate-step", "template-syntax"])
def test_bad_pipeline_files_are_refused_with_file_line_field(tmp_path, edit, where):
    from llmroute.strategy.loader import Loader
    from llmroute.strategy.protocol import KindContext
    from llmroute.strategy.registry import register_builtins
    from llmroute.types import Backend

    pools = {f"{p}1": Backend(f"{p}1", p, "vllm", "http://x", "m", 4096)
             for p in ("one", "two", "three")}
    loader = Loader(register_builtins(), KindContext(pools, {}, "one", 3))
    path = tmp_path / "chain.yaml"
    path.write_text(THREE.replace(*edit), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        loader.read(path)
    assert str(path) in err.value.message and where in err.value.message
