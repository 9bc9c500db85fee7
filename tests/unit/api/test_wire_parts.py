"""Malformed content parts, tools and tool calls are the client's 400 at the router, not an
engine's 500 that the router would retry on every backend and report as 502."""

from __future__ import annotations

import pytest

from llmroute.api.wire import parse_chat
from llmroute.errors import InvalidRequest

USER = {"role": "user", "content": "hi"}
CALL = {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize("body,param", [
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content"),
    ({"messages": [USER], "tools": [{"type": "function"}]}, "tools[0].function"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {"name": ""}}]},
     "tools[0].function.name"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "1"}]}]},
     "messages[0].tool_calls[0].type"),
    ({"messages": [{"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
], ids=["text-part-without-text", "tool-without-function", "tool-with-empty-name",
        "tool-call-without-type", "tool-call-without-arguments"])
def test_malformed_parts_are_a_400_naming_the_field(body, param):
    with pytest.raises(InvalidRequest) as err:
        parse_chat({"model": "auto", **body}, "r")
    assert err.value.param == param


def test_well_formed_parts_tools_and_calls_pass_unchanged():
    body = {"model": "auto", "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object"}}}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "1", "content": "3"}]}
    req = parse_chat(body, "r")
    assert req.body is body and req.has_tools and req.text.startswith("a")


def test_content_of_neither_accepted_type_names_the_json_types_not_validator_internals():
    with pytest.raises(InvalidRequest) as bad:
        parse_chat({"model": "m", "messages": [{"role": "user", "content": 5}]}, "r")
    assert bad.value.param == "messages[0].content"
    assert bad.value.message.endswith("invalid type (expected one of: str, list)")
