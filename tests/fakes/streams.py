"""Reading a client's SSE answer in tests: its ``data:`` events and its streamed text."""

from __future__ import annotations

import json
from typing import Any


def events(text: str) -> list[Any]:
    """The ``data:`` events of an SSE body: parsed JSON objects, ``"[DONE]"`` as is."""
    return [line[6:] if line[6:] == "[DONE]" else json.loads(line[6:])
            for line in text.split("\n\n") if line.startswith("data: ")]


def content(chunks: list[Any]) -> str:
    """The chat text the chunks stream (first choice's ``delta.content``)."""
    return "".join((c["choices"][0]["delta"].get("content") or "")
                   for c in chunks if isinstance(c, dict) and c.get("choices"))
