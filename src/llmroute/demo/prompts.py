"""Demo conversations: the built-in set, and loading a user's JSONL file.

A conversation is a list of request bodies sent in order; for multi-turn files each later
turn is built from the answers to the earlier ones (see ``runner.py``). A JSONL line is one
of: an OpenAI request body (``messages`` …), ``{"prompt": "…"}``, or MT-Bench style
``{"turns": ["…", "…"]}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmroute.errors import InvalidRequest

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}

LONG_TEXT = " ".join([
    "The harbour town of Kestrel Bay grew up around a single stone pier built in 1842 to",
    "shelter the herring fleet. For most of the nineteenth century the town's fortunes rose",
    "and fell with the fish: good seasons paid for the chapel, the school and the first",
    "lighthouse, while poor ones emptied the terraces as families left for the cities.",
    "When the railway arrived in 1879 it brought visitors as well as freight, and within",
    "twenty years the sea front had three hotels, a bandstand and a promenade lit by gas.",
    "The herring shoals failed in the 1920s, and the fleet shrank from sixty boats to nine.",
    "The town council responded by investing in tourism: it bought the cliff-top meadows",
    "for a public park, rebuilt the promenade after the great storm of 1931 and persuaded",
    "the railway company to run excursion trains on summer Sundays. During the Second",
    "World War the hotels were requisitioned as a naval training school, and the pier was",
    "closed to the public for six years. After the war the town struggled again. Package",
    "holidays abroad drew families away, two hotels closed, and by 1975 the population had",
    "fallen below four thousand for the first time in a century. The revival came from an",
    "unexpected direction: a marine research station opened in the old fish market in 1988,",
    "followed by a small university campus in 1996. Researchers and students filled the",
    "empty terraces, cafés replaced the chandlers, and the harbour found a new fleet of",
    "survey vessels and sailing dinghies. Today Kestrel Bay has about seven thousand",
    "residents. Its economy rests on research, education and a steady, quieter kind of",
    "tourism built around walking, sailing and the restored Victorian sea front. Local",
    "debates now concern housing costs, which have risen sharply as the campus grew, and",
    "the future of the pier, whose iron supports need a repair the council cannot afford",
    "alone. A community trust formed in 2021 has raised a third of the money and hopes to",
    "reopen the full length of the pier for its two-hundredth anniversary in 2042.",
])


@dataclass(frozen=True)
class Conversation:
    """``label`` for the table; ``turns`` user messages; ``base`` extra request fields;
    ``stream`` whether to stream."""

    label: str
    turns: tuple[str, ...]
    base: dict[str, Any] = field(default_factory=dict)
    stream: bool = True


def builtin() -> list[Conversation]:
    """The demo's varied set: code, maths, a long summary, translation, a tool call, a
    multi-turn chat, Chinese prompts; streamed and not."""
    return [
        Conversation("code", ("Write a Python function that checks whether a string is a "
                              "palindrome.",)),
        Conversation("math", ("Solve for x: 3x + 7 = 22. Show the steps.",), stream=False),
        Conversation("summary", (f"Summarize the following text in three sentences:\n\n"
                                 f"{LONG_TEXT}",)),
        Conversation("translation", ("Translate into French: 'The library opens at nine "
                                     "o'clock every morning.'",), stream=False),
        Conversation("tool call", ("What is the weather like in Paris right now?",),
                     {"tools": [WEATHER_TOOL], "tool_choice": "auto"}),
        Conversation("chat", ("Hi! I'm planning a picnic this weekend.",
                              "What food should I bring?")),
        Conversation("code (zh)", ("用Python写一个函数，计算列表中所有偶数的和。",)),
        Conversation("math (zh)", ("计算 15 乘以 24 等于多少？",), stream=False),
        Conversation("summary (zh)", (f"请总结下面这段文字：\n\n{LONG_TEXT}",)),
        Conversation("translation (zh)", ("把这句话翻译成英文：今天天气很好，我们去公园散步吧。",)),
    ]


def load_jsonl(path: Path) -> list[Conversation]:
    """Conversations from a JSONL file. Raises InvalidRequest naming the file when it cannot
    be read as UTF-8 text, and ``file:line`` for a bad line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidRequest(f"{path}: cannot read the prompts file: {reason}") from exc
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            out.append(_conversation(_json(line, path, n), f"{path.name}:{n}"))
    return out


def _json(line: str, path: Path, n: int) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"{path}:{n}: not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise InvalidRequest(f"{path}:{n}: each line must be a JSON object")
    return obj


def _conversation(obj: dict[str, Any], where: str) -> Conversation:
    if isinstance(obj.get("turns"), list):
        return Conversation(where, tuple(str(t) for t in obj["turns"]))
    if isinstance(obj.get("prompt"), str):
        return Conversation(where, (obj["prompt"],))
    if isinstance(obj.get("messages"), list):
        base = {k: v for k, v in obj.items() if k not in ("stream", "stream_options")}
        return Conversation(where, (), base, stream=bool(obj.get("stream", True)))
    raise InvalidRequest(f"{where}: expected 'messages', 'prompt' or 'turns'")
