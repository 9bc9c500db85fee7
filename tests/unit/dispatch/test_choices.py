"""``n`` > 1: served only by backends whose engine answers several choices (vLLM, SGLang:
the ``n`` capability), every choice relayed with the engine's usage (its total over the
choices); a 400 naming ``n`` when no candidate can, or when the request is streamed."""

from __future__ import annotations

from typing import Any

from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

CHAT = "/v1/chat/completions"
TWO = {"id": "chatcmpl-2", "object": "chat.completion", "created": 1, "model": "m",
       "choices": [{"index": i, "message": {"role": "assistant", "content": f"answer {i}"},
                    "finish_reason": "stop"} for i in range(2)],
       "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": "hi"}], **extra}


async def test_n_goes_only_to_a_backend_that_answers_several_choices():
    async with serve_upstream(["ok"]) as llama, serve_upstream([("raw", [TWO])]) as vllm:
        cfg = make_config([
            {"id": "a", "pool": "general", "base_url": llama.base_url, "engine": "llamacpp"},
            {"id": "b", "pool": "general", "base_url": vllm.base_url, "engine": "vllm"}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat(n=2))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert [c["message"]["content"] for c in answer["choices"]] == ["answer 0", "answer 1"]
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    assert answer["usage"]["completion_tokens"] == 4
    assert llama.requests == [] and vllm.requests[0]["n"] == 2


async def test_n_with_no_backend_able_is_a_400_naming_n():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url,
                            "engine": "ollama"},
                           {"id": "b", "pool": "general", "base_url": up.base_url,
                            "engine": "vllm", "capabilities": ["tools"]}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat(n=3))
            one = await client.post(CHAT, json=chat(n=1))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "n" and err["code"] == "n_unsupported"
    assert one.status_code == 200 and len(up.requests) == 1


async def test_streamed_n_is_refused_with_a_400_naming_n():
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}])
        async with open_router(cfg) as (_, client):
            r = await client.post(CHAT, json=chat(n=2, stream=True))
    assert r.status_code == 400 and up.requests == []
    err = r.json()["error"]
    assert err["param"] == "n" and "stream" in err["message"]
