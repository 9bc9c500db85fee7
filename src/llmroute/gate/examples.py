"""Labelled examples: the shipped utterances, config extras, and users' labelled files.

A labelled file has one JSON object per line: ``prompt`` (a string) or ``messages`` (OpenAI
chat messages, optionally ``tools``), ``intent``, and optionally ``also``: a list of other
intents that are acceptable answers for a row on a boundary people disagree on
(docs/intents.md), counted by the lenient score (``evaluate.lenient``). ``read_labelled`` turns each line into
a ``ChatRequest``; blank lines are skipped and a malformed line raises ConfigError naming it.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmroute.errors import ConfigError
from llmroute.gate.compress import prompt_request
from llmroute.gate.export import cache_root
from llmroute.types import ChatRequest

UTTERANCES = "utterances.jsonl"


@dataclass(frozen=True, slots=True)
class Example:
    """One labelled request; ``also``: other acceptable intents (may be empty)."""

    request: ChatRequest
    intent: str
    also: tuple[str, ...] = ()


def shipped_utterances() -> list[tuple[str, str]]:
    """``(text, intent)`` pairs from the package's ``gate/data/utterances.jsonl``. A row has
    ``text`` (one prompt) or ``messages`` (a multi-turn chat, OpenAI roles); a chat becomes
    what the gate reads of it at request time (``compress(...).text``: the latest user turn,
    then the earlier ones)."""
    ref = importlib.resources.files("llmroute.gate") / "data" / UTTERANCES
    rows = [json.loads(line) for line in ref.read_text(encoding="utf-8").splitlines() if line]
    return [(_row_text(r), r["intent"]) for r in rows]


def _row_text(row: Mapping[str, object]) -> str:
    """An utterance row's text: ``text``, or the compressed form of its ``messages``."""
    messages = row.get("messages")
    if isinstance(messages, list):
        from llmroute.gate.compress import compress

        return compress(prompt_request("", messages)).text
    return str(row["text"])


def user_examples_path() -> Path:
    """Where ``llmroute gate fit`` stores a user's examples (under ``$LLMROUTE_CACHE``)."""
    return cache_root() / "gate" / "user-examples.jsonl"


def user_examples() -> list[tuple[str, str]]:
    """``(latest user text, intent)`` pairs stored by ``gate fit`` (none when absent)."""
    path = user_examples_path()
    if not path.is_file():
        return []
    from llmroute.gate.compress import compress

    return [(compress(e.request).latest, e.intent) for e in read_labelled(path)]


def with_extras(base: Sequence[tuple[str, str]],
                extras: Mapping[str, Sequence[str]]) -> list[tuple[str, str]]:
    """``base`` plus the config's ``gate.utterances`` (intent → texts)."""
    return [*base, *((t, intent) for intent, texts in extras.items() for t in texts)]


def read_labelled(path: Path) -> list[Example]:
    """Every example in the JSONL file at ``path``. Raises ConfigError for an unreadable
    file or a line without ``intent`` and ``prompt``/``messages``."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from err
    return list(_parse(path, lines))


def _parse(path: Path, lines: Sequence[str]) -> Iterator[Example]:
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            yield Example(_request(row), str(row["intent"]), _also(row))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise ConfigError(f"{path}:{n}: need intent and prompt or messages, and also "
                              f"as a list of intents ({err})") from err


def _also(row: Mapping[str, object]) -> tuple[str, ...]:
    """A row's ``also`` intents (none when absent). Raises TypeError unless a list of str."""
    also = row.get("also", [])
    if not isinstance(also, list) or not all(isinstance(x, str) for x in also):
        raise TypeError("also must be a list of intents")
    return tuple(also)


def _request(row: Mapping[str, object]) -> ChatRequest:
    messages = row.get("messages")
    if isinstance(messages, list):
        return prompt_request("", messages, row.get("tools") or ())  # type: ignore[arg-type]
    prompt = row.get("prompt", row.get("text"))
    if not isinstance(prompt, str):
        raise TypeError("prompt must be a string")
    return prompt_request(prompt)
