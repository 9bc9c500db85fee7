"""The order verifier: reads both prompts and refuses a pair whose shared words stand in
another order, or whose words differ too much.

A bi-encoder's similarity cannot tell "Holly was influenced by Elton John" from "Elton John
was influenced by Holly": the same words, so nearly the same vector (PAWS, Zhang et al.,
NAACL 2019). The roles of a sentence are carried by its word order, so this verifier aligns
the two prompts' words (``difflib.SequenceMatcher``: the longest matching blocks, in order)
and counts

* ``moved`` — words both prompts have (as multisets) that the in-order alignment could not
  match: a word that changed places;
* ``changed`` — words only one prompt has, as a share of both prompts' words.

``Verdict(moved, changed)`` passes when ``moved <= max_moved`` and ``changed <=
max_changed``. Words are lower-cased Latin/digit runs and single CJK characters (on
PAWS-X dev, characters kept more true pairs at the same false hits than rjieba's words).
Thresholds are calibrated on PAWS-X dev (``bench/cache.py``) and reported on its test split.
Cost: one alignment of two short prompts, ~30–80 µs (``bench/cache.py`` prints it).
"""

from __future__ import annotations

import re
from collections import Counter
from difflib import SequenceMatcher
from typing import NamedTuple

MAX_MOVED = 0
"""Default: no shared word may change places."""
MAX_CHANGED = 0.12
"""Default: at most 12 % of the two prompts' words may be in one only (with every guard,
on PAWS-X dev: false hits 0.6 % in English, 0.9 % in Chinese; 8 %: 0.5 % and 0.6 % at
less recall, 16 % no more recall in English; ``bench/cache.py --calibrate``)."""

_WORD = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\W_]+")


class Verdict(NamedTuple):
    """``moved`` words (count) and ``changed`` share (0–1) of one pair."""

    moved: int
    changed: float

    def passes(self, max_moved: int = MAX_MOVED, max_changed: float = MAX_CHANGED) -> bool:
        """Whether the pair may share an answer at these bounds."""
        return self.moved <= max_moved and self.changed <= max_changed


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` (module docstring)."""
    return _WORD.findall(text.lower())


def compare(a: list[str], b: list[str]) -> Verdict:
    """The ``Verdict`` of two prompts' ``words``."""
    total = len(a) + len(b)
    if not total:
        return Verdict(0, 0.0)
    matcher = SequenceMatcher(None, a, b, autojunk=False)
    aligned = sum(block.size for block in matcher.get_matching_blocks())
    common = sum((Counter(a) & Counter(b)).values())
    return Verdict(common - aligned, (total - 2 * common) / total)
