"""Which answers a finished trace holds, and which of them were bad: handed off (the melt),
failed by a verifier, empty, truncated before the client's ``max_tokens`` — and the trace
note a request gets when its plan names a demoted backend."""

from __future__ import annotations

from llmroute.errors import UpstreamConnectError
from llmroute.observe.quality import answers_of, quality_note
from llmroute.observe.trace import Recorder
from llmroute.types import Answer, Backend, Candidate, QualityState, QualityView


def rec(max_tokens: int | None = None) -> Recorder:
    r = Recorder("r1", "r1")
    r.received(True, 5, "hi", max_tokens)
    return r


def test_a_handed_off_leg_is_bad_and_the_continuation_good():
    r = rec()
    r.attempt("a", 0.3, 0.01, 3, None, ok=False, entropy=4.2)
    r.handoff("a", "b", "entropy", 3, (4.0, 4.3))
    r.attempt("b", 0.1, 0.02, 9, None, ok=True, entropy=1.1)
    r.streamed({"choices": [{"finish_reason": "stop"}]}, "a fine answer")
    assert answers_of(r.finish(), r.answer, 7.0) == [Answer("a", 7.0, "handoff", 4.2),
                                                     Answer("b", 7.0, None, 1.1)]


def test_a_failure_before_the_first_token_is_no_answer():
    r = rec()
    r.attempt("a", 0.3, None, 0, UpstreamConnectError("refused", backend_id="a"), ok=False)
    r.attempt("b", 0.1, 0.01, 4, None, ok=True)
    r.streamed({"choices": [{"finish_reason": "stop"}]}, "ok")
    assert [x.backend_id for x in answers_of(r.finish(), r.answer, 0.0)] == ["b"]


def test_empty_and_truncated_answers_are_bad_but_a_tool_call_is_not_empty():
    empty = rec()
    empty.attempt("a", 0.1, 0.01, 1, None, ok=True)
    empty.streamed({"choices": [{"finish_reason": "stop"}]}, "  ")
    short = rec(max_tokens=100)
    short.attempt("a", 0.1, None, 12, None, ok=True)
    short.answered({"choices": [{"finish_reason": "length", "message": {"content": "x y"}}],
                    "usage": {"completion_tokens": 12}})
    full = rec(max_tokens=12)
    full.attempt("a", 0.1, None, 12, None, ok=True)
    full.answered({"choices": [{"finish_reason": "length", "message": {"content": "x"}}],
                   "usage": {"completion_tokens": 12}})
    tool = rec()
    tool.attempt("a", 0.1, 0.01, 1, None, ok=True)
    tool.streamed({"choices": [{"finish_reason": "tool_calls"}]}, "")
    got = [answers_of(r.finish(), r.answer, 0.0)[0].bad for r in (empty, short, full, tool)]
    assert got == ["empty", "truncated", None, None]


def test_a_draft_the_verifier_failed_is_bad():
    r = rec()
    r.attempt("draft", 0.3, None, 5, None, ok=True)
    r.step("verify", check="judge", pool="p", passed=False, reason="wrong")
    r.attempt("again", 0.1, None, 5, None, ok=True)
    r.step("verify", check="judge", pool="q", passed=True, reason="fine")
    r.answered({"choices": [{"finish_reason": "stop", "message": {"content": "ok"}}]})
    pools = {"draft": "p", "again": "q"}
    assert [(x.backend_id, x.bad) for x in answers_of(r.finish(), r.answer, 0.0, pools)] == [
        ("draft", "verify"), ("again", None)]


def test_the_note_names_the_demoted_backends_of_the_plan():
    views = {"b": QualityView(QualityState.PROBING, 0.1, 3.0)}
    cands = [Candidate(Backend("b", "p", "vllm", "http://b", "m", 10), 1.0)]
    assert quality_note(views, ("a", "b"), cands) == {
        "demoted": {"b": "probing"}, "chosen": "b", "chosen_demoted": True}
    assert quality_note(views, ("a", "c"), cands) is None
