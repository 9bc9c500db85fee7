"""Counting regex evidence, shared by the rules classifier and the complexity score.

Patterns compile with ``FLAGS`` (``re.IGNORECASE | re.ASCII``): ``\\b``/``\\w`` are ASCII, so
``\\bpython\\b`` matches inside ``用Python写`` (CJK characters count as non-word characters).
"""

from __future__ import annotations

import re
from itertools import islice

FLAGS = re.IGNORECASE | re.ASCII
MAX_MATCHES_SCANNED = 16


def count_distinct(pattern: re.Pattern[str], text: str, cap: int) -> int:
    """Distinct lower-cased matches of ``pattern`` among its first ``MAX_MATCHES_SCANNED``
    matches in ``text``, at most ``cap``."""
    matches = islice(pattern.finditer(text), MAX_MATCHES_SCANNED)
    return min(len({m.group(0).lower() for m in matches}), cap)


def count_matches(pattern: re.Pattern[str], text: str, cap: int) -> int:
    """Number of (not necessarily distinct) matches of ``pattern`` in ``text``, at most ``cap``."""
    return sum(1 for _ in islice(pattern.finditer(text), cap))
