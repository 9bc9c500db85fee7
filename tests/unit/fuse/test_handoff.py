"""Continuation requests per engine form, and the seam that joins legs for the client."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.backends.engines import capabilities
from llmroute.fuse.handoff import CONTINUE_INSTRUCTION, can_continue, continuation_body
from llmroute.fuse.seam import Seam

USER = {"role": "user", "content": "Name three colours."}
BODY = {"model": "auto", "messages": [USER], "max_tokens": 50, "stream": True}


@pytest.mark.parametrize(("engine", "extra", "tail"), [
    ("vllm", {"continue_final_message": True, "add_generation_prompt": False}, []),
    ("sglang", {"continue_final_message": True, "add_generation_prompt": False}, []),
    ("llamacpp", {}, []),
    ("openai", {}, [{"role": "user", "content": CONTINUE_INSTRUCTION}]),
    ("ollama", {}, [{"role": "user", "content": CONTINUE_INSTRUCTION}]),
], ids=["vllm", "sglang", "llamacpp", "openai", "ollama"])
def test_continuation_form_per_engine(engine, extra, tail):
    before = copy.deepcopy(BODY)
    out = continuation_body(BODY, "chat", capabilities(engine), "Red, green", 3)
    assert out == {**BODY, **extra, "max_tokens": 47, "messages": [
        USER, {"role": "assistant", "content": "Red, green"}, *tail]}
    assert BODY == before


def test_a_clients_own_prefill_is_extended_not_duplicated():
    body = {**BODY, "messages": [USER, {"role": "assistant", "content": "Sure: "}]}
    out = continuation_body(body, "chat", capabilities("llamacpp"), "Red", 1)
    assert out["messages"][-1] == {"role": "assistant", "content": "Sure: Red"}


def test_budget_never_drops_below_one_and_empty_prefix_resends_the_request():
    out = continuation_body({**BODY, "max_completion_tokens": 4}, "chat",
                            capabilities("vllm"), "", 9)
    assert out["max_completion_tokens"] == 1 and out["messages"] == [USER]


def test_completions_append_the_prefix_to_a_string_prompt_only():
    body = {"model": "auto", "prompt": "Once upon", "stream": True}
    assert continuation_body(body, "completions", capabilities("vllm"), " a time", 2)[
        "prompt"] == "Once upon a time"
    assert not can_continue({**body, "prompt": [1, 2]}, "completions", " a")
    assert continuation_body({**body, "prompt": [1, 2]}, "completions",
                             capabilities("vllm"), " a", 2) is None


def chunk(cid: str, text: str | None = None, finish: str | None = None,
          role: bool = False) -> dict:
    delta = {"role": "assistant", "content": None} if role else {}
    if text is not None:
        delta["content"] = text
    return {"id": cid, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def run(seam: Seam, chunks: list[dict], t0: float = 0.0) -> list[dict]:
    out = [seam.rewrite(c, t0 + i) for i, c in enumerate(chunks)]
    return [c for c in out if c is not None]


def text_of(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)


@pytest.mark.parametrize(("split", "gap_ms"), [(["Red, gr", "een, blue"], 10000.0),
                                               (["Red, green, blue"], 9000.0),
                                               (["R", "ed, green", ",", " blue"], 11000.0)],
                         ids=["split-echo", "one-delta", "many-deltas"])
def test_echoed_prefix_is_cut_however_the_engine_splits_it(split, gap_ms):
    """The gap runs from the last token sent (t=2 s) to the first *new* text (echo excluded)."""
    seam = Seam("chat", None)
    first = run(seam, [chunk("a", role=True), chunk("a", "Red"), chunk("a", ", green")])
    seam.hand_off({"from": "x", "to": "y", "reason": "cut"}, "Red, green")
    second = run(seam, [chunk("b", role=True), *[chunk("b", s) for s in split],
                        chunk("b", finish="stop")], t0=10)
    assert text_of(first + second) == "Red, green, blue"
    assert {c["id"] for c in first + second} == {"a"}
    assert sum("role" in c["choices"][0]["delta"] for c in first + second) == 1
    assert Seam.terminal(second[-1]) and not Seam.terminal(second[-2])
    assert seam.finish(second[-1])["llmroute"]["handoffs"] == [
        {"from": "x", "to": "y", "reason": "cut", "at_token": 2, "gap_ms": gap_ms}]


def test_an_echo_is_held_while_it_matches_and_a_mismatch_goes_out_unchanged():
    seam = Seam("chat", None)
    run(seam, [chunk("a", "Red")])
    seam.hand_off({"from": "x", "to": "y", "reason": "cut"}, "Red")
    assert text_of(run(seam, [chunk("b", "Re"), chunk("b", "d!")])) == "!"
    seam2 = Seam("chat", None)
    seam2.hand_off({"from": "x", "to": "y", "reason": "cut"}, "Red")
    assert text_of(run(seam2, [chunk("b", "Blue")])) == "Blue"


def test_tool_call_deltas_mark_a_call_in_flight_until_finish():
    seam = Seam("chat", None)
    call = {"index": 0, "function": {"name": "f", "arguments": "{"}}
    seam.rewrite({"id": "a", "choices": [{"delta": {"tool_calls": [call]},
                                          "finish_reason": None}]}, 0)
    assert seam.tool_in_flight
    seam.rewrite(chunk("a", finish="tool_calls"), 1)
    assert not seam.tool_in_flight


def test_usage_chunk_carries_the_extension_and_completions_text_is_joined():
    seam = Seam("completions", None)
    seam.rewrite({"id": "a", "choices": [{"text": "Once", "finish_reason": None}]}, 0)
    seam.hand_off({"from": "x", "to": "y", "reason": "stall"}, "")
    out = seam.rewrite({"id": "b", "choices": [{"text": " more", "finish_reason": None}]}, 1)
    usage = seam.rewrite({"id": "b", "choices": [], "usage": {"total_tokens": 3}}, 2)
    assert out["id"] == "a" and seam.text == "Once more"
    assert Seam.terminal(usage)
    assert seam.finish(usage)["llmroute"]["handoffs"][0]["reason"] == "stall"


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


@given(st.lists(text, min_size=1, max_size=8), st.lists(text, max_size=8), st.booleans(),
       st.integers(0, 5))
def test_the_client_text_is_prefix_then_continuation_for_any_chunking(first, rest, echo, cut):
    """Whatever the chunk boundaries, with or without an echoing fallback, the client reads
    exactly the primary's streamed text followed by the fallback's new text."""
    seam = Seam("chat", None)
    sent = run(seam, [chunk("a", t) for t in first])
    prefix = "".join(first)
    seam.hand_off({"from": "x", "to": "y", "reason": "cut"}, prefix if echo else "")
    upstream = (prefix + "".join(rest)) if echo else "".join(rest)
    pieces = [upstream[i:i + cut + 1] for i in range(0, len(upstream), cut + 1)]
    sent += run(seam, [chunk("b", p) for p in pieces] + [chunk("b", finish="stop")])
    assert text_of(sent) == prefix + "".join(rest) == seam.text
    assert {c["id"] for c in sent} == {"a"}


def test_one_head_across_a_handoff_and_blanks_take_the_requests_own():
    seam = Seam("chat", None, include_usage=False, head=("chatcmpl-req", 99, "auto"))
    first = seam.rewrite({**chunk("x", "Hi"), "id": "", "created": 0, "model": ""}, 0)
    seam.hand_off({"from": "x", "to": "y", "reason": "cut"}, "")
    later = seam.rewrite({**chunk("b", " there"), "created": 5, "model": "other"}, 1)
    assert first is not None and later is not None
    heads = {(c["id"], c["created"], c["model"]) for c in (first, later)}
    assert heads == {("chatcmpl-req", 99, "auto")}
