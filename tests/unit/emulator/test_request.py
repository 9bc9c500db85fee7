"""The emulator's own request parsing: what it reads from good bodies, how it rejects bad
ones, and that it shares no code with the router's parser."""

from __future__ import annotations

import ast
from pathlib import Path

import orjson
import pytest

import llmroute.emulator
from llmroute.emulator.request import EngineRequest, parse_request
from llmroute.errors import InvalidRequest
from llmroute.text import estimate_chat_tokens, estimate_tokens

HELLO = [{"role": "user", "content": "hello there"}]


def parse(endpoint: str, body: object) -> EngineRequest:
    return parse_request(endpoint, orjson.dumps(body), "rid-1")  # type: ignore[arg-type]


def test_a_plain_chat_body() -> None:
    req = parse("chat", {"model": "m", "messages": HELLO})
    assert req == EngineRequest("chat", "rid-1", "m", False, estimate_chat_tokens(["hello there"]),
                                None, None, False, "hello there")


def test_chat_fields_the_engine_reads() -> None:
    req = parse("chat", {"model": "m", "messages": HELLO, "stream": True, "max_tokens": 5,
                         "max_completion_tokens": 7, "logprobs": True, "top_logprobs": 3,
                         "stream_options": {"include_usage": True}})
    assert (req.stream, req.max_tokens, req.top_n, req.include_usage) == (True, 7, 3, True)


LOGPROBS = [
    ("not-asked", {}, None),
    ("asked-without-alternatives", {"logprobs": True}, 0),
    ("alternatives-without-logprobs", {"logprobs": False, "top_logprobs": 4}, None),
    ("asked-with-alternatives", {"logprobs": True, "top_logprobs": 20}, 20),
]


@pytest.mark.parametrize("extra,top_n", [c[1:] for c in LOGPROBS], ids=[c[0] for c in LOGPROBS])
def test_chat_logprobs(extra: dict, top_n: int | None) -> None:
    assert parse("chat", {"model": "m", "messages": HELLO, **extra}).top_n == top_n


def test_chat_prompt_counts_text_parts_and_every_turn() -> None:
    messages = [{"role": "system", "content": None},
                {"role": "user", "content": [{"type": "text", "text": "look"},
                                             {"type": "image_url", "image_url": {"url": "u"}},
                                             {"type": "text", "text": "at this"}]}]
    req = parse("chat", {"model": "m", "messages": messages})
    assert req.prompt_tokens == estimate_chat_tokens(["", "look\nat this"])


def test_unknown_fields_are_tolerated_as_vllm_does() -> None:
    body = {"model": "m", "messages": [{**HELLO[0], "reasoning": "x"}], "ignore_eos": True,
            "stream_options": {"include_usage": False, "continuous_usage_stats": True},
            "min_tokens": 3, "guided_json": {"type": "object"}}
    req = parse("chat", body)
    assert (req.model, req.include_usage) == ("m", False)


PROMPTS = [
    ("text", "def f():", estimate_tokens("def f():")),
    ("empty-text", "", 0),
    ("texts", ["a b", "c"], estimate_tokens("a b\nc")),
    ("empty-texts", ["", ""], estimate_tokens("\n")),
    ("one-empty-text", [""], 1),
    ("token-ids", [1, 2, 3], 3),
    ("batches-of-ids", [[1, 2], [3]], 3),
]


@pytest.mark.parametrize("prompt,tokens", [c[1:] for c in PROMPTS], ids=[c[0] for c in PROMPTS])
def test_completion_prompt_sizes(prompt: object, tokens: int) -> None:
    assert parse("completions", {"model": "m", "prompt": prompt}).prompt_tokens == tokens


def test_completion_fields_the_engine_reads() -> None:
    req = parse("completions", {"model": "m", "prompt": "x", "max_tokens": 4, "logprobs": 0,
                                "max_completion_tokens": 9, "stream": True,
                                "stream_options": {"include_usage": True}})
    assert req.endpoint == "completions"
    assert (req.stream, req.max_tokens, req.top_n, req.include_usage) == (True, 4, 0, True)


BAD = [
    ("not-json", "chat", b"{", "invalid_json", None),
    ("not-an-object", "chat", b"[1, 2]", "invalid_body", None),
    ("null", "completions", b"null", "invalid_body", None),
    ("no-model", "chat", {"messages": HELLO}, "missing_required_parameter", "model"),
    ("empty-model", "chat", {"model": "", "messages": HELLO}, "invalid_value", "model"),
    ("messages-not-a-list", "chat", {"model": "m", "messages": "x"}, "invalid_value",
     "messages"),
    ("no-messages", "chat", {"model": "m", "messages": []}, "invalid_value", "messages"),
    ("unknown-role", "chat", {"model": "m", "messages": [{"role": "bot", "content": "x"}]},
     "invalid_value", "messages"),
    ("content-a-number", "chat", {"model": "m", "messages": [{"role": "user", "content": 5}]},
     "invalid_value", "messages"),
    ("max-tokens-a-string", "chat", {"model": "m", "messages": HELLO, "max_tokens": "5"},
     "invalid_value", "max_tokens"),
    ("max-tokens-zero", "chat", {"model": "m", "messages": HELLO, "max_tokens": 0},
     "invalid_value", "max_tokens"),
    ("stream-a-string", "chat", {"model": "m", "messages": HELLO, "stream": "true"},
     "invalid_value", "stream"),
    ("usage-a-string", "chat", {"model": "m", "messages": HELLO,
                                "stream_options": {"include_usage": "yes"}},
     "invalid_value", "stream_options"),
    ("two-choices", "chat", {"model": "m", "messages": HELLO, "n": 2}, "invalid_value", "n"),
    ("top-logprobs-21", "chat", {"model": "m", "messages": HELLO, "logprobs": True,
                                 "top_logprobs": 21}, "invalid_value", "top_logprobs"),
    ("logprobs-a-number", "chat", {"model": "m", "messages": HELLO, "logprobs": 1},
     "invalid_value", "logprobs"),
    ("temperature-3", "chat", {"model": "m", "messages": HELLO, "temperature": 3},
     "invalid_value", "temperature"),
    ("no-prompt", "completions", {"model": "m"}, "missing_required_parameter", "prompt"),
    ("prompt-a-number", "completions", {"model": "m", "prompt": 5}, "invalid_value",
     "prompt"),
    ("legacy-logprobs-a-bool", "completions", {"model": "m", "prompt": "x", "logprobs": True},
     "invalid_value", "logprobs"),
]


@pytest.mark.parametrize("endpoint,body,code,param", [c[1:] for c in BAD],
                         ids=[c[0] for c in BAD])
def test_bad_bodies_are_invalid_requests(endpoint: str, body: object, code: str,
                                         param: str | None) -> None:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    with pytest.raises(InvalidRequest) as caught:
        parse_request(endpoint, raw, "rid-1")  # type: ignore[arg-type]
    err = caught.value
    assert (err.status, err.code, err.param) == (400, code, param)
    assert err.message and (param is None or err.message.startswith(param))


def test_nothing_in_the_emulator_imports_the_router_api() -> None:
    root = Path(llmroute.emulator.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.startswith("llmroute.api")], path.name
