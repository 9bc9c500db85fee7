"""The seam: rewrites every upstream chunk into the client's one unbroken stream.

Pure (the caller passes ``now``, seconds). Across handoffs the client sees the first
backend's chunk ``id`` throughout, no second ``role`` chunk, no echoed prefix (engines that
repeat the assistant prefix have it cut off, see ``backends/engines.py``), and
logprobs only when it asked for them (trimmed to its own ``top_logprobs``). The stream's last
chunk (the caller holds back each ``terminal`` chunk — a ``finish_reason``, or the usage
chunk with no choices — until it knows which is last, then passes it through ``finish``)
carries the extension field ``llmroute: {"handoffs": [{"from", "to", "reason", "at_token",
"gap_ms"}, …]}``, which OpenAI clients ignore.
"""

from __future__ import annotations

from typing import Any

from llmroute.types import Endpoint


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

    def __init__(self, endpoint: Endpoint, client_top_logprobs: int | None):
        """``client_top_logprobs``: None when the client did not ask for logprobs, else the
        number of alternatives it asked for (0 for the chosen token only)."""
        self._key = "text" if endpoint == "completions" else "content"
        self._client_top = client_top_logprobs
        self.id: str | None = None
        self.text = ""
        self.tokens = 0
        self.tool_in_flight = False
        self.finished = False
        self.handoffs: list[dict[str, Any]] = []
        self._echo = ""
        self._held = ""
        self._last_token_at: float | None = None
        self._gap_open = False

    def hand_off(self, record: dict[str, Any], echo: str) -> None:
        """A handoff begins; ``record`` has ``from``, ``to``, ``reason``; the next backend
        will repeat ``echo`` before its continuation (``""`` when it does not echo)."""
        self.handoffs.append({**record, "at_token": self.tokens, "gap_ms": None})
        self._echo, self._held, self._gap_open = echo, "", True

    def rewrite(self, obj: dict[str, Any], now: float) -> dict[str, Any] | None:
        """The client's version of upstream chunk ``obj``, or None when nothing is left to
        send (an echo swallowed whole, or a repeated role chunk after a handoff)."""
        if self.id is None:
            self.id = obj.get("id")
        elif "id" in obj:
            obj["id"] = self.id
        choices = obj.get("choices") or []
        carried = [self._choice(c, now) for c in choices]
        keep = any(carried) or not choices or not self.handoffs
        return obj if keep else None

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
        body = choice.get("delta") if self._key == "content" else choice
        body = body if isinstance(body, dict) else {}
        text = self._unecho(body.get(self._key) or "")
        if self._key in body and body[self._key] is not None:
            body[self._key] = text
        self._account(choice, body, text, now)
        self._filter_logprobs(choice)
        if choice.get("finish_reason"):
            self.tool_in_flight, self.finished = False, True
            return True
        return bool(text or body.get("tool_calls") or choice.get("logprobs")) \
            or (not self.handoffs and "role" in body)

    def _account(self, choice: dict[str, Any], body: dict[str, Any], text: str,
                 now: float) -> None:
        lp = (choice.get("logprobs") or {}).get("content") if self._key == "content" else None
        new_tokens = len(lp) if lp else (1 if text or body.get("tool_calls") else 0)
        self.tokens += new_tokens
        self.text += text
        self.tool_in_flight = self.tool_in_flight or bool(body.get("tool_calls"))
        if new_tokens:
            if self._gap_open and self._last_token_at is not None:
                self.handoffs[-1]["gap_ms"] = round((now - self._last_token_at) * 1000, 1)
            self._gap_open = False
            self._last_token_at = now

    def _unecho(self, text: str) -> str:
        """Drop the echoed prefix from the start of the next backend's text, holding back
        text while it still matches; on a mismatch the held text goes out unchanged."""
        if not self._echo or not text:
            return text
        held = self._held + text
        if len(held) < len(self._echo) and self._echo.startswith(held):
            self._held = held
            return ""
        echo, self._echo, self._held = self._echo, "", ""
        return held.removeprefix(echo)

    def _filter_logprobs(self, choice: dict[str, Any]) -> None:
        if "logprobs" not in choice:
            return
        if self._client_top is None:
            del choice["logprobs"]
            return
        for entry in (choice.get("logprobs") or {}).get("content") or []:
            if isinstance(entry, dict) and isinstance(entry.get("top_logprobs"), list):
                entry["top_logprobs"] = entry["top_logprobs"][:self._client_top]
