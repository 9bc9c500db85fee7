"""Two tasks asked in one breath: "translate this into French and then summarize it",
"先翻译成英文，然后总结要点". Such a request's probabilities are rarely close — the whole
text reads as one task, the other scores near 0 — so the top-two ``composite_margin`` test
misses it. Here the instruction is cut at its sequence connectives and each clause is read
on its own by the first stage.

``clauses(latest)`` gives the clauses of the latest user turn's instruction: its first line,
up to ``INSTRUCTION_CHARS`` characters and before a colon that introduces pasted material
(so "then" in a pasted document splits nothing), split at ``SEQUENCE`` ("then", "and then",
"after that", "afterwards", "finally"; 然后, 接着, 随后, 之后再, 再把, 再将, 再用, 最后);
an empty list when it has no connective. ``composite_of(label, clause_labels)`` is the
request's two labels when at least two clauses name different intents — other than
``chat``, which a filler clause ("thanks, then …") reads as — the verdict's own label
first when a clause names it. What a clause names is the first stage's top label when its
probability is at least ``CLAUSE_MIN`` (the caller reads the clauses in one batch).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

INSTRUCTION_CHARS = 300
"""How much of the latest turn's first line is read as the instruction (characters)."""
CLAUSE_MIN = 0.6
"""The first-stage probability (0–1) a clause's top label needs to count as its intent."""
MIN_CLAUSE_CHARS = 4
"""Shorter pieces between connectives ("so", "和") are not clauses (characters)."""
MAX_CLAUSES = 4
_FILLER = "chat"
SEQUENCE = re.compile(
    r"(?:[,;，；。]\s*)?(?:\b(?:and\s+then|then|after\s+that|afterwards|finally)\b"
    r"|然后|接着|随后|之后再|再把|再将|再用|最后)", re.IGNORECASE)
_INTRO = re.compile(r"[:：]")


def clauses(latest: str) -> list[str]:
    """The instruction's clauses (module docstring), at most ``MAX_CLAUSES``; ``[]`` when
    it has fewer than two."""
    head = latest[:INSTRUCTION_CHARS].split("\n", 1)[0]
    head = _INTRO.split(head, 1)[0]
    parts = [p.strip(" ,;，；。") for p in SEQUENCE.split(head)]
    found = [p for p in parts if len(p) >= MIN_CLAUSE_CHARS]
    return found[:MAX_CLAUSES] if len(found) >= 2 else []


def composite_of(label: str, clause_labels: Sequence[str | None]) -> tuple[str, ...]:
    """The request's two intents from its clauses' labels (None: no confident label), or
    ``()`` when fewer than two distinct non-filler intents are named; ``label`` (the
    verdict's) first when a clause names it."""
    named = list(dict.fromkeys(x for x in clause_labels if x is not None and x != _FILLER))
    if len(named) < 2:
        return ()
    if label in named:
        named.remove(label)
        return (label, named[0])
    return (named[0], named[1])
