"""Answer shapes: tool-call deltas indexed and merged whatever the engine omits, legacy
completions converted from the chat shape."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from llmroute.fuse.shape import ToolIndex, legacy_logprobs, text_choice, text_completion

args = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def assemble(chunks: list[list[dict[str, Any]]]) -> dict[int, dict[str, str]]:
    """What the SDK's stream helper builds: per index, the id, name and joined arguments."""
    index, calls = ToolIndex(), {}
    for chunk in chunks:
        entries = index.normalise(chunk)
        assert len({e["index"] for e in entries}) == len(entries)  # one entry per index
        for e in entries:
            call = calls.setdefault(e["index"], {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or e.get("id") or ""
            fn = e.get("function") or {}
            call["name"] = call["name"] or fn.get("name") or ""
            call["arguments"] += fn.get("arguments") or ""
    return calls


@given(st.lists(st.lists(args, min_size=1, max_size=5), min_size=1, max_size=3),
       st.booleans(), st.integers(1, 3))
def test_fragments_without_index_assemble_into_the_calls_sent(calls, indexed, per_chunk):
    """Each call: its first fragment carries id and name, the rest only arguments; with or
    without ``index``, several fragments per chunk: the assembled calls are the ones sent."""
    fragments: list[dict[str, Any]] = []
    for i, parts in enumerate(calls):
        for j, part in enumerate(parts):
            fn: dict[str, Any] = {"arguments": part}
            entry: dict[str, Any] = {"function": fn} | ({"index": i} if indexed else {})
            if j == 0:
                entry |= {"id": f"call_{i}", "type": "function"}
                fn["name"] = f"f{i}"
            fragments.append(entry)
    chunks = [fragments[k:k + per_chunk] for k in range(0, len(fragments), per_chunk)]
    assert assemble(chunks) == {i: {"id": f"call_{i}", "name": f"f{i}",
                                    "arguments": "".join(parts)}
                                for i, parts in enumerate(calls)}


def test_chat_shaped_completions_become_text_completions():
    lp = {"content": [{"token": "Hi", "logprob": -0.1,
                       "top_logprobs": [{"token": "Hi", "logprob": -0.1},
                                        {"token": "Ho", "logprob": -2.5}]}]}
    choice = {"index": 0, "delta": {"content": "Hi"}, "logprobs": lp, "finish_reason": None}
    assert text_choice(choice) == {"index": 0, "text": "Hi", "finish_reason": None,
                                   "logprobs": {"tokens": ["Hi"], "token_logprobs": [-0.1],
                                                "top_logprobs": [{"Hi": -0.1, "Ho": -2.5}]}}
    legacy = {"tokens": ["a"], "token_logprobs": [-1.0], "top_logprobs": [{"a": -1.0}]}
    assert legacy_logprobs(legacy) is legacy
    answer = {"object": "text_completion", "choices": [{"index": 0, "text": "x"}]}
    assert text_completion(answer) is answer
