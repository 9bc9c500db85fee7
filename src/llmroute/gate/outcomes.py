"""Outcome files: which pool answered which prompt well, the data the win head fits on.

One JSON object a line: ``prompt`` (a string) or ``messages`` (OpenAI chat messages,
optionally ``tools``), and ``outcomes``: pool name → a correctness flag (``true`` /
``false``) or a score from 1 to 10 (a judge's, a grader's, a user's rating) — what a team
can export from its logs, judges or evals. Every pool of the ladder the head is fitted for
must be in every row's ``outcomes`` (other pools are ignored), each pool given the same
way on every row (all flags or all scores). Blank lines are skipped.

A pool's quality on a row is 1/0 for a flag and ``(score − 1) / 9`` for a score (0–1).
A cheaper pool *answers well enough* on a row when its quality is at least the ladder's
last (reference) pool's: ties count as well enough, since sending that prompt up the ladder
would not have done better. That is the label the win head learns (RouteLLM's win label
seen from the weak side: Ong et al. 2024, "RouteLLM: Learning to Route LLMs with Preference
Data", §3, where the router estimates P(the strong model wins) for a query).

``read_outcomes`` checks the whole file before anything is fitted or stored, and every
problem is a ConfigError naming ``file:line: field``: unreadable JSON, no prompt, a pool
missing from a row's outcomes, a flag that is not a boolean, a score outside 1–10, a pool
given as flags on one row and scores on another, fewer than ``MIN_ROWS`` rows, and a
cheaper pool whose label has one class only (always, or never, as good as the reference:
nothing to learn).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmroute.errors import ConfigError
from llmroute.gate.compress import message_texts, prompt_request
from llmroute.text import estimate_chat_tokens
from llmroute.types import ChatRequest

MIN_ROWS = 50
"""The fewest rows a head is fitted on: with fewer, 5-fold calibration has under ten rows a
fold and the probabilities mean little."""
SCORE_RANGE = (1.0, 10.0)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One row: the ``request`` as the gate reads it (its ``prompt_tokens`` the router's
    own estimate, as a served request gets) and each ladder pool's ``quality`` (0–1, ladder
    order), read from file ``line``."""

    request: ChatRequest
    quality: tuple[float, ...]
    line: int


def read_outcomes(path: Path, pools: Sequence[str]) -> list[Outcome]:
    """Every row of the outcome file at ``path`` for the ladder ``pools`` (cheapest first,
    at least two). Raises ConfigError naming ``file:line: field`` (module docstring)."""
    lines = _lines(path)
    kinds: dict[str, tuple[str, int]] = {}
    rows = [_row(path, n, obj, pools, kinds) for n, obj in _objects(path, lines)]
    if len(rows) < MIN_ROWS:
        raise ConfigError(f"{path}: {len(rows)} row(s); the win head needs at least "
                          f"{MIN_ROWS}")
    for j, pool in enumerate(pools[:-1]):
        labels = {r.quality[j] >= r.quality[-1] for r in rows}
        if len(labels) < 2:
            how = "as well as" if labels == {True} else "worse than"
            raise ConfigError(f"{path}: outcomes.{pool}: on every row {pool} answers {how} "
                              f"{pools[-1]}: one class only, nothing to learn")
    return rows


def data_pools(path: Path) -> tuple[str, ...]:
    """The pools named in the first row's ``outcomes`` (file order). Raises ConfigError
    when the file cannot be read or its first row has no ``outcomes`` object."""
    for n, obj in _objects(path, _lines(path)):
        outcomes = obj.get("outcomes")
        if not isinstance(outcomes, dict) or not outcomes:
            raise ConfigError(f"{path}:{n}: outcomes: need an object of pool → flag or score")
        return tuple(str(p) for p in outcomes)
    raise ConfigError(f"{path}: no rows")


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from err


def _objects(path: Path, lines: Sequence[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{n}: not JSON: {err.msg}") from err
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}:{n}: a row is one JSON object")
        yield n, obj


def _row(path: Path, n: int, obj: Mapping[str, Any], pools: Sequence[str],
         kinds: dict[str, tuple[str, int]]) -> Outcome:
    outcomes = obj.get("outcomes")
    if not isinstance(outcomes, dict):
        raise ConfigError(f"{path}:{n}: outcomes: need an object of pool → flag or score")
    quality = tuple(_quality(path, n, pool, outcomes, kinds) for pool in pools)
    return Outcome(row_request(obj, f"{path}:{n}"), quality, n)


def _quality(path: Path, n: int, pool: str, outcomes: Mapping[str, Any],
             kinds: dict[str, tuple[str, int]]) -> float:
    """One pool's quality on row ``n`` (0–1); the first row a pool appears on fixes whether
    it is given as flags or scores (``kinds``: pool → (kind, line))."""
    where = f"{path}:{n}: outcomes.{pool}"
    if pool not in outcomes:
        raise ConfigError(f"{where}: missing (every row needs every pool of the ladder: "
                          f"{', '.join(outcomes) or 'none given'})")
    value = outcomes[pool]
    kind = "flag" if isinstance(value, bool) else "score"
    if kind == "score" and not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: {json.dumps(value)} is neither a flag (true/false) nor "
                          f"a score (1–10)")
    first = kinds.setdefault(pool, (kind, n))
    if first[0] != kind:
        raise ConfigError(f"{where}: a {kind} here, but line {first[1]} gives a {first[0]}: "
                          f"give a pool as flags on every row or as scores on every row")
    if kind == "flag":
        return 1.0 if value else 0.0
    low, high = SCORE_RANGE
    if not low <= value <= high:
        raise ConfigError(f"{where}: score {value} is outside {low:g}–{high:g}")
    return (float(value) - low) / (high - low)


def row_request(obj: Mapping[str, Any], where: str) -> ChatRequest:
    """A row's request (its ``prompt`` or ``messages`` and ``tools``) with the router's own
    token estimate. Raises ConfigError naming ``where`` (``file:line``) without either."""
    messages, prompt = obj.get("messages"), obj.get("prompt")
    if isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages):
        tools = obj.get("tools") or ()
        request = prompt_request("", messages, tools if isinstance(tools, list) else ())
    elif isinstance(prompt, str) and prompt.strip():
        request = prompt_request(prompt)
    else:
        raise ConfigError(f"{where}: prompt: need a non-empty prompt string or a "
                          f"messages list")
    return request._replace(prompt_tokens=estimate_chat_tokens(message_texts(request)))
