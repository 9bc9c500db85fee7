"""The order verifier: reads both prompts and refuses a pair whose shared words stand in
another order that may change who does what, or whose words differ too much.

A bi-encoder's similarity cannot tell "Holly was influenced by Elton John" from "Elton John
was influenced by Holly": the same words, so nearly the same vector (PAWS, Zhang et al.,
NAACL 2019). The roles of a sentence are carried by its word order, so this verifier aligns
the two prompts' words and reads how the shared ones moved:

* ``placed`` — the asked prompt's shared words, each at the position of its counterpart in
  the stored prompt: ``difflib.SequenceMatcher``'s in-order blocks first, then each word left
  over paired with the first unpaired occurrence of the same word;
* ``moved`` — the fewest shared words that must change places to restore the stored order
  (those off a longest increasing run of ``placed``), a CJK character counting as half a
  word (``CJK_WORD``);
* ``breaks`` — the places where ``placed`` steps back. One break is one block of words moved
  to the other side of the rest, as a whole: "In 1990, X founded Y" / "X founded Y in 1990",
  "flights from A to B" / "to B, flights from A" — who does what is unchanged. Two or more
  are a trade of places around something that stayed: "A beat B" / "B beat A" (``A`` before
  ``beat`` and ``beat`` before ``B`` both reversed), "张三打了李四" / "李四打了张三";
* ``changed`` — words only one prompt has, as a share of both prompts' words.

``Verdict.passes`` accepts a pair when ``changed <= max_changed`` and either ``moved <=
max_moved`` or the words moved as one block of at least ``min_block`` words (one break):
a single word or name that jumps elsewhere ("Stoke beat A and B" / "A and B beat Stoke",
"the mystic poet … philosophical unity" / "the philosophical poet … mystic unity") is what
the hard negatives of PAWS do, and is refused. Words are lower-cased Latin/digit runs and
single CJK characters (a run stops at one: ``1990年`` is two words) (on PAWS-X dev, characters kept more true pairs at the same false
hits than rjieba's words). Thresholds are calibrated on PAWS-X dev (``bench/cache.py``) and
reported on its test split. Cost: one alignment of two short prompts, ~30–80 µs.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from difflib import SequenceMatcher
from itertools import pairwise
from typing import NamedTuple

MAX_MOVED = 0
"""Default: no shared word may change places alone."""
MIN_BLOCK = 2
"""Default: a block of at least two words may move as a whole (PAWS-X dev, every other guard
on: false hits 1.7 % with recall 0.37 in English, 1.5 % and 0.17 in Chinese; with no move
allowed 0.8 % and 0.22, 1.2 % and 0.16; a block of three: 1.3 % and 0.30, 1.4 % and 0.16;
``bench/cache.py --calibrate``)."""
MAX_CHANGED = 0.12
"""Default: at most 12 % of the two prompts' words may be in one only (with every guard,
on PAWS-X dev: false hits 0.6 % in English, 0.9 % in Chinese; 8 %: 0.5 % and 0.6 % at
less recall, 16 % no more recall in English; ``bench/cache.py --calibrate``)."""

CJK_WORD = 0.5
"""What one CJK character counts for in ``moved``: the verifier reads Chinese by character,
and a Chinese word is about two (so ``min_block`` 2 is two words in either script)."""

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[^\W_\u3400-\u9fff\uf900-\ufaff]+")


class Verdict(NamedTuple):
    """One pair: ``moved`` words (count), ``breaks`` (count) and ``changed`` share (0–1)
    (module docstring)."""

    moved: float
    changed: float
    breaks: int = 0

    def passes(self, max_moved: int = MAX_MOVED, max_changed: float = MAX_CHANGED,
               min_block: int = MIN_BLOCK) -> bool:
        """Whether the pair may share an answer at these bounds (``min_block`` 0: no block
        may move)."""
        return self.changed <= max_changed and self.in_order(max_moved, min_block)

    def in_order(self, max_moved: int = MAX_MOVED, min_block: int = MIN_BLOCK) -> bool:
        """Whether the shared words kept who does what: at most ``max_moved`` moved, or one
        block of at least ``min_block`` words (0: none) moved as a whole."""
        return self.moved <= max_moved or (
            0 < min_block <= self.moved and self.breaks == 1)


def words(text: str) -> list[str]:
    """The lower-cased words of ``text`` (module docstring)."""
    return _WORD.findall(text.lower())


def compare(a: list[str], b: list[str]) -> Verdict:
    """The ``Verdict`` of two prompts' ``words`` (``a`` stored, ``b`` asked)."""
    total = len(a) + len(b)
    if not total:
        return Verdict(0, 0.0)
    common = sum((Counter(a) & Counter(b)).values())
    at = placed(a, b)
    breaks = sum(1 for x, y in pairwise(at) if y < x)
    kept = set(_increasing(at))
    moved = sum(CJK_WORD if _CJK.match(a[i]) else 1.0 for i in at if i not in kept)
    return Verdict(moved, (total - 2 * common) / total, breaks)


def placed(a: list[str], b: list[str]) -> list[int]:
    """The position in ``a`` of each of ``b``'s words that ``a`` has too, in ``b``'s order
    (module docstring)."""
    at: list[int | None] = [None] * len(b)
    taken: set[int] = set()
    for block in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            at[block.b + k] = block.a + k
            taken.add(block.a + k)
    free: dict[str, list[int]] = {}
    for i, word in enumerate(a):
        if i not in taken:
            free.setdefault(word, []).append(i)
    for j, word in enumerate(b):
        if at[j] is None and free.get(word):
            at[j] = free[word].pop(0)
    return [i for i in at if i is not None]


def _increasing(values: list[int]) -> list[int]:
    """The values of a longest strictly increasing subsequence (patience sorting with
    back-links)."""
    tails: list[int] = []
    ends: list[int] = []
    back: list[int] = []
    for k, v in enumerate(values):
        i = bisect.bisect_left(tails, v)
        tails[i:i + 1] = [v]
        ends[i:i + 1] = [k]
        back.append(ends[i - 1] if i else -1)
    out, k = [], ends[-1] if ends else -1
    while k >= 0:
        out.append(values[k])
        k = back[k]
    return out
