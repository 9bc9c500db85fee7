"""Answer shapes the client is owed, whatever shape the engine answered in. Pure functions.

* Tool-call deltas: the official SDKs assemble streamed tool calls by ``index``; some engines
  omit it, or send two entries for one index in one chunk (the SDK's stream helper then
  crashes). ``ToolIndex.normalise`` gives every entry an index (by ``id``, else the call in
  progress, else its position) and merges entries that share one.
* Legacy completions: engines that answer ``/v1/completions`` in the chat shape (``delta`` or
  ``message`` instead of ``text``, chat-format ``logprobs``) are converted to the
  ``text_completion`` shape: ``text_choice`` per choice, ``legacy_logprobs`` for logprobs,
  ``text_completion`` for a whole non-streamed answer.
"""

from __future__ import annotations

from typing import Any


class ToolIndex:
    """Per-stream memory of the tool calls seen: ``id`` → index, and the last index used."""

    __slots__ = ("_ids", "_last")

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._last: int | None = None

    def normalise(self, calls: list[Any]) -> list[Any]:
        """``calls`` (one delta's ``tool_calls``) with an ``index`` on every entry and one
        entry per index (fragments of one call merged: ``arguments`` joined, the first
        ``id``/``type``/``name`` kept)."""
        merged: dict[int, dict[str, Any]] = {}
        for pos, call in enumerate(calls):
            if not isinstance(call, dict):
                continue
            index = self._index(call, pos)
            if index in merged:
                _merge(merged[index], call)
            else:
                merged[index] = {**call, "index": index}
        return list(merged.values())

    def _index(self, call: dict[str, Any], pos: int) -> int:
        index, cid = call.get("index"), call.get("id")
        if not isinstance(index, int):
            if cid:
                index = self._ids.get(cid, len(self._ids))
            else:
                index = self._last if self._last is not None else pos
        if cid:
            self._ids.setdefault(cid, index)
        self._last = index
        return index


def _merge(into: dict[str, Any], call: dict[str, Any]) -> None:
    for key in ("id", "type"):
        if not into.get(key) and call.get(key):
            into[key] = call[key]
    fn, more = dict(into.get("function") or {}), call.get("function") or {}
    if not fn.get("name") and more.get("name"):
        fn["name"] = more["name"]
    if more.get("arguments"):
        fn["arguments"] = (fn.get("arguments") or "") + more["arguments"]
    into["function"] = fn


def legacy_logprobs(lp: Any) -> Any:
    """Chat-format logprobs (``{"content": [{token, logprob, top_logprobs}]}``) in the legacy
    completions format (``tokens``, ``token_logprobs``, ``top_logprobs`` as token → logprob
    maps); anything else unchanged."""
    entries = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(entries, list):
        return lp
    entries = [e for e in entries if isinstance(e, dict)]
    return {"tokens": [e.get("token") for e in entries],
            "token_logprobs": [e.get("logprob") for e in entries],
            "top_logprobs": [{t.get("token"): t.get("logprob")
                              for t in e.get("top_logprobs") or [] if isinstance(t, dict)}
                             for e in entries]}


def text_choice(choice: dict[str, Any]) -> dict[str, Any]:
    """A chat-shaped choice (``delta`` or ``message``) as a legacy completions choice
    (``index``, ``text``, ``logprobs``, ``finish_reason``); a legacy one unchanged."""
    body = choice.get("delta", choice.get("message"))
    if not isinstance(body, dict):
        return choice
    return {"index": choice.get("index", 0), "text": body.get("content") or "",
            "logprobs": legacy_logprobs(choice.get("logprobs")),
            "finish_reason": choice.get("finish_reason")}


def text_completion(answer: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed ``/v1/completions`` answer in the ``text_completion`` shape (an answer
    already in it comes back unchanged)."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or not any(
            isinstance(c, dict) and "message" in c for c in choices):
        return answer
    return {**answer, "object": "text_completion",
            "choices": [text_choice(c) if isinstance(c, dict) else c for c in choices]}
