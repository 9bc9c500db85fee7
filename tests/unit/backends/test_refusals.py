"""Recognising an engine's refusal of a body shape (``backends/refusals.py``): each rule reads
the engine's own words (those ``fakes/engine_rules.py`` copies), only for a shape the body
had and the backend's quirks still sent."""

from __future__ import annotations

from typing import Any

import pytest

from llmroute.backends.engines import Quirks
from llmroute.backends.refusals import recognise
from llmroute.errors import UpstreamConnectError, UpstreamStatusError

from fakes import engine_rules as rules

DEV = {"messages": [{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}]}
PARTS = {"messages": [{"role": "user", "content": [{"type": "text", "text": "y"}]}]}
NULL_TURN = {"messages": [{"role": "user", "content": "y"}, {"role": "assistant",
             "content": None, "tool_calls": [{"id": "c", "type": "function",
                                              "function": {"name": "f", "arguments": "{}"}}]}]}
LIST_STOP = {"prompt": "y", "stop": ["a", "b"]}
STREAM_OPTIONS = {"messages": [{"role": "user", "content": "y"}],
                  "stream_options": {"include_usage": True}}


def refused(rule: Any, body: dict[str, Any], path: str = rules.CHAT) -> UpstreamStatusError:
    """The router's error for ``rule``'s refusal of ``body``, as the client builds it."""
    answer = rule(body, path)
    assert answer is not None
    status, obj = answer
    return UpstreamStatusError(f"the engine answered {status}: {obj['error']['message']}",
                               upstream_status=status, body=obj, backend_id="b")


@pytest.mark.parametrize("rule,body,path,quirk,change", [
    (rules.vllm_stream_options, STREAM_OPTIONS, rules.CHAT, "stream_options",
     {"stream_options": "streamed"}),
    (rules.vllm_alternating_template, DEV, rules.CHAT, "developer_role",
     {"developer_role": False}),
    (rules.ollama_null_content, NULL_TURN, rules.CHAT, "tool_call_content",
     {"tool_call_content": "empty"}),
    (rules.ollama_string_content, PARTS, rules.CHAT, "string_content",
     {"string_content": True}),
    (rules.ollama_list_stop, LIST_STOP, "/v1/completions", "list_stop", {"list_stop": False}),
], ids=["vllm-stream-options", "template-roles", "ollama-nil", "ollama-parts",
        "ollama-list-stop"])
def test_each_engine_s_refusal_names_its_quirk(rule, body, path, quirk, change):
    assert recognise(refused(rule, body, path), body, Quirks()) == (quirk, change)


def test_the_words_alone_are_not_enough_the_body_must_have_had_the_shape():
    err = refused(rules.vllm_alternating_template,
                  {"messages": [{"role": "assistant", "content": "x"}]})
    assert recognise(err, {"messages": [{"role": "assistant", "content": "x"}]},
                     Quirks()) is None  # roles refused, but no developer message was sent
    assert recognise(refused(rules.vllm_alternating_template, DEV), DEV,
                     Quirks(developer_role=False)) is None  # it was sent as system already


def test_other_refusals_and_failures_are_not_adapted():
    other = UpstreamStatusError("the engine answered 400: temperature must be <= 2",
                                upstream_status=400, body={"error": {}}, backend_id="b")
    assert recognise(other, {**DEV, "stop": ["a", "b"]}, Quirks()) is None
    overload = UpstreamStatusError("the engine answered 503: role overloaded",
                                   upstream_status=503, body={"error": {}}, backend_id="b")
    assert recognise(overload, DEV, Quirks()) is None
    assert recognise(UpstreamConnectError("cut", backend_id="b"), DEV, Quirks()) is None


def test_a_template_error_llama_server_answers_500_with_json_counts():
    body = {"error": {"code": 500, "type": "server_error",
                      "message": "Only user and assistant roles are supported!"}}
    err = UpstreamStatusError("the engine answered 500: Only user and assistant roles are "
                              "supported!", upstream_status=500, body=body, backend_id="b")
    assert recognise(err, DEV, Quirks()) == ("developer_role", {"developer_role": False})
