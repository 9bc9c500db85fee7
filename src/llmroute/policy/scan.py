"""Scanning text for list entries: whole texts (a request) or a stream fed piece by piece
(an answer), with masks applied to the original text.

``TextScan`` keeps the text not yet released (``pending``) and its normalised form. Each
``feed`` appends a piece, finds the matches it completes, applies them (``mask``: the
original characters of the match, format characters inside included, become ``*``s, so
the text keeps its length; ``block``: the text is cut where the match starts and the scan
ends) and releases all but the last ``hold`` normalised characters — the longest entry's
length — since a match still to come can start no earlier. A whole-word match at the very
end waits for the next character (or the end of the text) to settle its boundary. Each
match is reported once, when it is settled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmroute.policy.normalize import Normalizer
from llmroute.policy.wordlist import Hit, Matcher


@dataclass(slots=True)
class Scanned:
    """One step's outcome: ``text`` to release now, the settled ``hits`` (every action),
    and the ``blocked`` hit that ended the scan (None: it goes on)."""

    text: str
    hits: list[Hit] = field(default_factory=list)
    blocked: Hit | None = None


class TextScan:
    """An incremental scan of one text in ``direction`` (``input`` or ``output``) with
    ``matcher``'s lists (module docstring). After a block, ``done`` is True and further
    feeds release nothing."""

    __slots__ = ("_matcher", "_normalizer", "_direction", "hold", "pending", "_norm",
                 "_offsets", "_before", "done")

    def __init__(self, matcher: Matcher, normalizer: Normalizer, direction: str):
        self._matcher, self._normalizer, self._direction = matcher, normalizer, direction
        self.hold = matcher.longest[direction]
        self.pending = ""
        self._norm = ""
        self._offsets: list[int] | None = None  # None: identity over ``pending``
        self._before = ""
        self.done = False

    def feed(self, text: str, final: bool = False) -> Scanned:
        """Add ``text`` (``final``: nothing follows) and release what is settled."""
        if self.done:
            return Scanned("")
        prev = len(self._norm)
        self._append(text)
        hits = [h for h in self._matcher.hits(self._norm, self._direction, max(prev - 1, 0),
                                              self._before, final)
                if h.end > prev or (h.end == prev and h.spec.whole_word)]
        blocked = self._apply(hits) if hits else None
        if blocked is not None:
            self.done = True
            return Scanned(self.pending[:self._orig(blocked.start)], hits, blocked)
        return Scanned(self._release(len(self._norm) if final else len(self._norm) - self.hold),
                       hits)

    def _append(self, text: str) -> None:
        norm, offsets = self._normalizer.normalize(text)
        base = len(self.pending)
        if offsets is not None and self._offsets is None:
            self._offsets = list(range(base))
        if self._offsets is not None:
            self._offsets.extend([base + o for o in offsets] if offsets is not None
                                 else range(base, base + len(text)))
        self.pending += text
        self._norm += norm

    def _apply(self, hits: list[Hit]) -> Hit | None:
        """Mask the ``mask`` hits in ``pending``; the earliest ``block`` hit, if any."""
        blocked = None
        for h in hits:
            if h.spec.action == "mask":
                a, b = self._orig(h.start), self._orig(h.end - 1) + 1
                self.pending = self.pending[:a] + "*" * (b - a) + self.pending[b:]
            elif h.spec.action == "block" and (blocked is None or h.start < blocked.start):
                blocked = h
        return blocked

    def _release(self, cut: int) -> str:
        """Release ``pending`` up to normalised index ``cut`` (all of it at the end)."""
        whole = cut >= len(self._norm)
        if cut <= 0 and not whole:
            return ""
        ocut = len(self.pending) if whole else self._orig(cut)
        out = self.pending[:ocut]
        self._before = self._norm[cut - 1] if cut > 0 else self._before
        self.pending, self._norm = self.pending[ocut:], self._norm[cut:]
        if self._offsets is not None:
            self._offsets = [o - ocut for o in self._offsets[cut:]]
            if self.pending.isascii():
                self._offsets = None
        return out

    def _orig(self, i: int) -> int:
        """The index in ``pending`` of the character normalised index ``i`` came from."""
        return i if self._offsets is None else self._offsets[i]


def scan_text(matcher: Matcher, normalizer: Normalizer, text: str, direction: str
              ) -> Scanned:
    """The whole ``text`` scanned at once (every list applying to ``direction``)."""
    return TextScan(matcher, normalizer, direction).feed(text, final=True)
