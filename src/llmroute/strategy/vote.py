"""The votes of ``kind: fusion`` (pure, no I/O): a weighted majority over normalised short
answers, and a field-level weighted vote over JSON answers.

A ballot is one voter's answer and its weight (the pool's accuracy weight × the answer's
confidence, ≥ 0). Totals are compared with a relative tolerance (``TIE``): totals within it
of the best are tied, and a tie goes to the option whose first ballot comes earliest (the
voters' configured order) — so scaling every weight by one factor never changes the winner,
and a unanimous vote wins whatever the weights.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

TRAILING = " \t\r\n.!?;:,。！？；：，"
"""Characters stripped from the end of a short answer before it is compared."""
TIE = 1e-9
"""Relative tolerance under which two vote totals are tied."""
MISSING = "\x00missing"
"""The field-level vote's option for "this answer has no such field"."""


@dataclass(frozen=True, slots=True)
class Ballot:
    """One voter's ``answer`` (text, or a parsed JSON value) and its ``weight`` (≥ 0)."""

    answer: Any
    weight: float


def normalise(text: str) -> str:
    """A short answer as compared by the vote: stripped, casefolded, trailing
    punctuation removed (``" Paris. "`` → ``"paris"``)."""
    return text.strip().casefold().rstrip(TRAILING)


def winner(keys: Sequence[Hashable], weights: Sequence[float]) -> tuple[Hashable, float]:
    """The key with the highest total weight among ``keys`` (one per ballot, in voter
    order) and its total; ties (``TIE``) go to the key seen first. Raises ValueError for
    no keys."""
    if not keys:
        raise ValueError("a vote needs at least one ballot")
    totals: dict[Hashable, float] = {}
    for key, weight in zip(keys, weights, strict=True):
        totals[key] = totals.get(key, 0.0) + weight
    best = max(totals.values())
    for key, total in totals.items():
        if math.isclose(total, best, rel_tol=TIE) or total >= best:
            return key, total
    raise AssertionError("unreachable: the best total is among the totals")


def text_vote(ballots: Sequence[Ballot]) -> int:
    """The index of the ballot that wins a majority vote over normalised text answers:
    the heaviest ballot (earliest on a tie) of the winning answer. Raises ValueError for
    no ballots."""
    keys = [normalise(b.answer) for b in ballots]
    key, _ = winner(keys, [b.weight for b in ballots])
    return _heaviest(ballots, lambda i: keys[i] == key)


def json_vote(ballots: Sequence[Ballot], valid: Callable[[Any], bool]) -> Any:
    """The field-level weighted vote over parsed JSON answers (each already ``valid``):
    when every answer is an object, each field's value is voted on separately (values
    compared as canonical JSON; an answer lacking the field votes for leaving it out); the
    fused object is returned when it is itself ``valid``, else (and for non-object
    answers) the winning whole answer. Raises ValueError for no ballots."""
    weights = [b.weight for b in ballots]
    if all(isinstance(b.answer, dict) for b in ballots):
        fused = _fields(ballots, weights)
        if valid(fused):
            return fused
    key, _ = winner([_canonical(b.answer) for b in ballots], weights)
    return json.loads(str(key))


def _fields(ballots: Sequence[Ballot], weights: list[float]) -> dict[str, Any]:
    names = list(dict.fromkeys(k for b in ballots for k in b.answer))
    fused: dict[str, Any] = {}
    for name in names:
        keys = [_canonical(b.answer[name]) if name in b.answer else MISSING for b in ballots]
        key, _ = winner(keys, weights)
        if key != MISSING:
            fused[name] = json.loads(str(key))
    return fused


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _heaviest(ballots: Sequence[Ballot], chosen: Callable[[int], bool]) -> int:
    picks = [i for i in range(len(ballots)) if chosen(i)]
    return max(picks, key=lambda i: (ballots[i].weight, -i))
