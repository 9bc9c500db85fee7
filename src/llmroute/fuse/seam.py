"""The seam: rewrites every upstream chunk into the client's one unbroken stream.

Pure (the caller passes ``now``, seconds). Across handoffs the client sees the first
backend's chunk ``id`` throughout, no second ``role`` chunk, no repeated text (an engine's
echo of the assistant prefix, a generic-form fallback that restarts the answer or repeats
its last words: the rule is in ``fuse/overlap.py``), and
logprobs only when it asked for them (trimmed to its own ``top_logprobs``). The stream's last
chunk (the caller holds back each ``terminal`` chunk — a ``finish_reason``, or the usage
chunk with no choices — until it knows which is last, then passes it through ``finish``)
carries the extension field ``llmroute: {"handoffs": [{"from", "to", "reason", "at_token",
"gap_ms"}, …]}``, which OpenAI clients ignore.

Normalised for the client (``fuse/shape.py``): one ``id``, ``created`` and ``model`` on every
chunk (the first content-bearing chunk's, blanks replaced by the request's own); chunks
without choices (metadata, usage) only with ``usage`` and only when the client asked for it
(``include_usage``), which also strips ``usage`` from content chunks otherwise; after a
handoff the usage is what the client received (the first leg's prompt tokens, the
completion tokens of every leg); tool-call deltas indexed and merged per index; legacy
completions in the ``text_completion`` shape, their ``logprobs`` kept.
"""

from __future__ import annotations

from typing import Any

from llmroute.fuse.overlap import new_text, pending
from llmroute.fuse.shape import ToolIndex, text_choice
from llmroute.types import Endpoint

Head = tuple[str, int, str]
"""A stream's ``(id, created, model)``: ``created`` in epoch seconds."""


def include_usage(body: dict[str, Any]) -> bool:
    """True when the client asked for the usage chunk (``stream_options.include_usage``)."""
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def client_top_logprobs(endpoint: Endpoint, body: dict[str, Any]) -> int | None:
    """What the client asked for: None (no logprobs), else its ``top_logprobs`` (0 when it
    asked only for the chosen token's logprob). Legacy completions: always None here (the
    fuse does not request logprobs there, so the engine's answer passes unchanged)."""
    if endpoint != "chat" or not body.get("logprobs"):
        return None
    top = body.get("top_logprobs")
    return top if isinstance(top, int) else 0


class Seam:
    """Per-request stream state: ``text`` sent so far, ``tokens`` streamed (logprob entries,
    else content chunks), ``tool_in_flight`` (tool-call deltas began, no finish yet),
    ``finished`` (a ``finish_reason`` was seen: the answer is whole)."""

    def __init__(self, endpoint: Endpoint, client_top_logprobs: int | None, *,
                 include_usage: bool = True, head: Head = ("", 0, "")):
        """``client_top_logprobs``: None when the client did not ask for logprobs, else the
        number of alternatives it asked for (0 for the chosen token only; legacy completions
        keep the engine's logprobs as they are); ``include_usage``: the client asked for the
        usage chunk; ``head``: the ``(id, created, model)`` that stands in for blank ones."""
        self._legacy = endpoint == "completions"
        self._key = "text" if self._legacy else "content"
        self._client_top = client_top_logprobs
        self._usage = include_usage
        self._default_head = head
        self._head: Head | None = None
        self._prompt: int | None = None  # the first leg's prompt tokens, once reported
        self._tools = ToolIndex()
        self.id: str | None = None
        self.text = ""
        self.tokens = 0
        self.tool_in_flight = False
        self.finished = False
        self.handoffs: list[dict[str, Any]] = []
        self._echo = ""
        self._redo = ""  # text a restarting fallback may repeat (fuse/overlap.py)
        self._held = ""
        self._last_token_at: float | None = None
        self._gap_open = False

    def hand_off(self, record: dict[str, Any], echo: str, restarts: bool = False) -> None:
        """A handoff begins; ``record`` has ``from``, ``to``, ``reason``; the next backend
        will repeat ``echo`` before its continuation (``""`` when it does not echo);
        ``restarts``: it continues in the generic form, so it may start the answer over or
        repeat its last words (``fuse/overlap.py``)."""
        self.handoffs.append({**record, "at_token": self.tokens, "gap_ms": None})
        self._echo, self._held, self._gap_open = echo, "", True
        self._redo = self.text if restarts else ""

    def rewrite(self, obj: dict[str, Any], now: float) -> dict[str, Any] | None:
        """The client's version of upstream chunk ``obj`` (rewritten in place), or None when
        nothing is left to send (an echo swallowed whole, a repeated role chunk after a
        handoff, a chunk without choices that is not usage the client asked for)."""
        choices = obj.get("choices") or []
        usage = obj.get("usage")
        if usage is not None:
            if not self._usage:
                del obj["usage"]
            elif isinstance(usage, dict):
                obj["usage"] = self._delivered(usage)
        if not choices and (usage is None or not self._usage):
            return None  # metadata only, or usage the client did not ask for
        obj["id"], obj["created"], obj["model"] = self._head or self._take_head(obj)
        if self._legacy and obj.get("object") == "chat.completion.chunk":
            obj["object"] = "text_completion"
        carried = [self._choice(c, now) for c in choices]
        keep = any(carried) or not choices or not self.handoffs
        return obj if keep else None

    def _take_head(self, obj: dict[str, Any]) -> Head:
        """The stream's head, from its first relayed chunk (blanks: the defaults)."""
        cid, created, model = obj.get("id"), obj.get("created"), obj.get("model")
        default = self._default_head
        self._head = (cid if isinstance(cid, str) and cid else default[0],
                      created if isinstance(created, int) and created > 0 else default[1],
                      model if isinstance(model, str) and model else default[2])
        self.id = self._head[0]
        return self._head

    def _delivered(self, usage: dict[str, Any]) -> dict[str, Any]:
        """``usage`` as the client received it: before any handoff as reported (its prompt
        tokens noted); after one, the first leg's prompt tokens (reported, else this leg's
        less the prefix it was given) and every leg's completion tokens."""
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not isinstance(prompt, int) or not isinstance(completion, int):
            return usage
        if not self.handoffs:
            self._prompt = prompt if self._prompt is None else self._prompt
            return usage
        before = self.handoffs[-1]["at_token"]
        first = self._prompt if self._prompt is not None else max(prompt - before, 0)
        return {**usage, "prompt_tokens": first, "completion_tokens": before + completion,
                "total_tokens": first + before + completion}

    @staticmethod
    def terminal(obj: dict[str, Any]) -> bool:
        """True for a chunk that may end the stream: a ``finish_reason``, or no choices."""
        choices = obj.get("choices") or []
        return not choices or any(c.get("finish_reason") for c in choices)

    def finish(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj``, the stream's last chunk, with the ``llmroute`` extension field."""
        return {**obj, "llmroute": {"handoffs": self.handoffs}}

    def _choice(self, choice: dict[str, Any], now: float) -> bool:
        """Rewrite one choice in place; False when it carries nothing for the client."""
        if self._legacy and "delta" in choice:
            legacy = text_choice(choice)
            choice.clear()
            choice.update(legacy)
        body = choice if self._legacy else choice.get("delta")
        body = body if isinstance(body, dict) else {}
        calls = body.get("tool_calls")
        if calls:
            calls = body["tool_calls"] = self._tools.normalise(calls)
            self.tool_in_flight = True
        final = bool(choice.get("finish_reason"))
        text = self._unecho(body.get(self._key) or "", final)
        if text or (self._key in body and body[self._key] is not None):
            body[self._key] = text
            if not self._legacy:
                choice["delta"] = body
        self._account(choice, bool(text or calls), text, now)
        self._filter_logprobs(choice)
        if choice.get("finish_reason"):
            self.tool_in_flight, self.finished = False, True
            return True
        return bool(text or calls or choice.get("logprobs")) \
            or (not self.handoffs and "role" in body)

    def _account(self, choice: dict[str, Any], carries: bool, text: str,
                 now: float) -> None:
        """Count the tokens ``choice`` brings (its logprob entries, else 1 when it
        ``carries`` text or tool calls) and note when they came."""
        lp = None if self._legacy else (choice.get("logprobs") or {}).get("content")
        new_tokens = len(lp) if lp else (1 if carries else 0)
        self.tokens += new_tokens
        self.text += text
        if new_tokens:
            if self._gap_open and self._last_token_at is not None:
                self.handoffs[-1]["gap_ms"] = round((now - self._last_token_at) * 1000, 1)
            self._gap_open = False
            self._last_token_at = now

    def _unecho(self, text: str, final: bool) -> str:
        """Drop repeated text (an echo, a restart: ``fuse/overlap.py``) from the start of the
        next backend's text, holding text back while it may still be a repeat; ``final``
        (the choice finished) decides with what is held."""
        if not (self._echo or self._redo) or not (text or final):
            return text
        held = self._held + text
        if not final and pending(held, self._echo, self._redo):
            self._held = held
            return ""
        out = new_text(held, self._echo, self._redo, final)
        self._echo = self._redo = self._held = ""
        return out

    def _filter_logprobs(self, choice: dict[str, Any]) -> None:
        if self._legacy or "logprobs" not in choice:
            return
        if self._client_top is None:
            del choice["logprobs"]
            return
        for entry in (choice.get("logprobs") or {}).get("content") or []:
            if isinstance(entry, dict) and isinstance(entry.get("top_logprobs"), list):
                entry["top_logprobs"] = entry["top_logprobs"][:self._client_top]
