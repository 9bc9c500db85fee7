"""Stop sequences the engine was not given: the router cuts the answer at them itself.

A backend whose engine takes one ``stop`` string only (``list_stop: false``, configured or
learned from its refusal) is sent the first; ``pending_stops`` names the rest, and the
answer is cut at the earliest of them, as the engine would have cut it: the text before the
stop is kept, the stop itself and everything after it dropped, and the answer finishes with
``finish_reason: "stop"``.

* JSON answers: ``cut_answer`` cuts each choice's text (``message.content``, or a legacy
  completion's ``text``).
* Streams: ``StopCutter`` filters the text deltas in order. A stop can straddle chunks, so
  the cutter holds back the longest tail of the text that is still the beginning of some
  stop (at most the longest stop less one character) and releases it as soon as it cannot
  be; at the end of the answer what is held is released. Nothing else is delayed.

Pure: no I/O. Costs nothing for a request without a list of stops (``pending_stops`` is
None and no cutter is made).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmroute.backends.learned import LearnedQuirks
from llmroute.types import Backend


def pending_stops(body: dict[str, Any], learned: LearnedQuirks, backend: Backend
                  ) -> tuple[str, ...] | None:
    """The stops of ``body`` that ``backend`` is not sent (all but the first when its engine
    takes one stop only: ``list_stop`` false, configured or ``learned``); None when there are
    none (no stop, one stop, or an engine that takes the list). The body is read first: a
    request without a list of stops costs one key look-up."""
    stop = body.get("stop")
    if not isinstance(stop, list) or len(stop) < 2 or learned.quirks(backend).list_stop:
        return None
    rest = tuple(s for s in stop[1:] if isinstance(s, str) and s)
    return rest or None


def cut(text: str, stops: Sequence[str]) -> int | None:
    """The index where the earliest of ``stops`` begins in ``text``; None when none occurs."""
    found = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(found) if found else None


def cut_answer(answer: dict[str, Any], stops: Sequence[str]) -> dict[str, Any]:
    """A non-streamed answer with every choice's text cut at its earliest stop (that choice
    then finishes with ``stop``); ``answer`` is not changed."""
    choices = answer.get("choices")
    if not isinstance(choices, list):
        return answer
    return {**answer, "choices": [_cut_choice(c, stops) if isinstance(c, dict) else c
                                  for c in choices]}


def _cut_choice(choice: dict[str, Any], stops: Sequence[str]) -> dict[str, Any]:
    message = choice.get("message")
    holder, key = (message, "content") if isinstance(message, dict) else (choice, "text")
    text = holder.get(key)
    at = cut(text, stops) if isinstance(text, str) else None
    if at is None:
        return choice
    if holder is choice:
        return {**choice, key: text[:at], "finish_reason": "stop"}
    return {**choice, "message": {**holder, key: text[:at]}, "finish_reason": "stop"}


def cut_chunk(cutter: StopCutter, obj: dict[str, Any], key: str) -> bool:
    """Filter the text (``key``: ``content`` in a chat delta, ``text`` in a legacy choice) of
    streamed chunk ``obj``'s first choice through ``cutter``, in place; True when a stop was
    found (the choice then finishes with ``stop``). A chunk that finishes the answer releases
    what the cutter held."""
    choices = obj.get("choices")
    if not choices or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    body = choice if key == "text" else choice.get("delta")
    body = body if isinstance(body, dict) else {}
    text = body.get(key)
    out, stopped = cutter.feed(text if isinstance(text, str) else "")
    if choice.get("finish_reason") and not stopped:
        out += cutter.release()
    if out or isinstance(text, str):
        body[key] = out
        if key != "text":
            choice["delta"] = body
    if stopped:
        choice["finish_reason"] = "stop"
    return stopped


class StopCutter:
    """Cuts one streamed answer at the earliest of ``stops`` (non-empty strings).

    ``feed(text)`` → ``(out, stopped)``: the text that may go to the client now and whether a
    stop was found (then ``out`` ends where the stop began, and the answer is over).
    ``release()`` → what is held back, at the end of the answer."""

    __slots__ = ("_stops", "_held")

    def __init__(self, stops: Sequence[str]):
        self._stops = tuple(stops)
        self._held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """The part of ``held + text`` that is sure (see the class docstring)."""
        if not text:
            return "", False
        buffer = self._held + text
        at = cut(buffer, self._stops)
        if at is not None:
            self._held = ""
            return buffer[:at], True
        keep = self._partial(buffer)
        self._held = buffer[len(buffer) - keep:] if keep else ""
        return buffer[:len(buffer) - keep], False

    def release(self) -> str:
        """The text held back (the end of the answer came: it was no stop)."""
        held, self._held = self._held, ""
        return held

    def _partial(self, buffer: str) -> int:
        """Length of the longest tail of ``buffer`` that is a proper beginning of a stop."""
        best = 0
        for stop in self._stops:
            for k in range(min(len(stop) - 1, len(buffer)), best, -1):
                if buffer.endswith(stop[:k]):
                    best = k
                    break
        return best
