"""Word lists read and compiled into one Aho–Corasick automaton (pyahocorasick).

A list file is UTF-8 text, one entry (a word or a phrase) a line; surrounding whitespace
is stripped, blank lines and ``#`` comments are skipped. Entries are normalised
(``policy/normalize.py``) before they go into the automaton, so they match normalised text.
An entry that is empty after normalisation or longer than the limit makes the list
invalid (``ConfigError`` naming ``file:line``): a stream holds back the longest entry's
length of text, so that length is bounded.

``Matcher.hits(norm, direction, …)`` finds every match of every list that applies to a
direction, with whole-word checks for ``word``-mode lists. A phrase matches only whole:
``量子武器`` does not match ``量子`` alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import ahocorasick

from llmroute.config.filter import Action, WordListConfig
from llmroute.errors import ConfigError
from llmroute.policy.normalize import Normalizer


@dataclass(frozen=True, slots=True)
class ListSpec:
    """One compiled list: its ``name``, ``action``, whether it matches whole words only, and
    the directions (``input``, ``output``) it applies to."""

    name: str
    action: Action
    whole_word: bool
    directions: frozenset[str]


@dataclass(frozen=True, slots=True)
class Hit:
    """A match in normalised text: ``norm[start:end]`` is an entry of list ``spec``."""

    start: int
    end: int
    spec: ListSpec


class Matcher:
    """The compiled lists: ``specs``, one automaton over every entry (its value: the entry's
    length and the indices of the lists holding it), ``longest``, the longest entry of a
    list for each direction (characters, 0 when none), ``max_len`` the longest of all and
    ``size`` the number of distinct entries."""

    def __init__(self, specs: Sequence[ListSpec], words: dict[str, list[int]]):
        self.specs = tuple(specs)
        self._automaton = ahocorasick.Automaton()
        self.longest = {d: 0 for d in ("input", "output")}
        for word, lists in words.items():
            self._automaton.add_word(word, (len(word), tuple(lists)))
            for d in {d for i in lists for d in self.specs[i].directions}:
                self.longest[d] = max(self.longest[d], len(word))
        self._empty = not words
        if words:
            self._automaton.make_automaton()
        self.size = len(words)
        self.max_len = max(self.longest.values())

    def clean(self, norm: str) -> bool:
        """Whether no entry of any list occurs anywhere in ``norm`` (then ``hits`` finds
        nothing, whatever the direction): one pass of the automaton, stopped at the first
        entry found."""
        return self._empty or next(self._automaton.iter(norm), None) is None

    def hits(self, norm: str, direction: str, start: int = 0, before: str = "",
             final: bool = True) -> Iterator[Hit]:
        """The matches in ``norm`` of lists applying to ``direction`` that end after index
        ``start``; ``before`` is the character preceding ``norm`` (for whole-word checks;
        ``""``: none). A whole-word match at the very end of ``norm`` is left out unless
        ``final`` (the next character may still come)."""
        if self._empty:
            return
        for last, (length, lists) in self._automaton.iter(norm, max(start - self.max_len, 0)):
            end = last + 1
            if end <= start:
                continue
            begin = end - length
            for i in lists:
                spec = self.specs[i]
                if direction not in spec.directions:
                    continue
                if spec.whole_word and not _whole(norm, begin, end, before, final):
                    continue
                yield Hit(begin, end, spec)


def _whole(norm: str, begin: int, end: int, before: str, final: bool) -> bool:
    prev = norm[begin - 1] if begin > 0 else before
    if end == len(norm) and not final:
        return False
    nxt = norm[end] if end < len(norm) else ""
    return not (_wordy(prev) or _wordy(nxt))


def _wordy(char: str) -> bool:
    return bool(char) and (char.isalnum() or char == "_")


def compile_lists(lists: Sequence[WordListConfig], paths: Sequence[Path], max_chars: int,
                  normalizer: Normalizer) -> Matcher:
    """Read every list (``paths[i]`` is ``lists[i]``'s file) into one Matcher. Raises
    ConfigError naming ``file:line`` for every problem (unreadable file, entry too long or
    empty after normalisation)."""
    words: dict[str, list[int]] = {}
    problems: list[str] = []
    for i, (cfg, path) in enumerate(zip(lists, paths, strict=True)):
        try:
            for word in read_list(path, max_chars, normalizer):
                holders = words.setdefault(word, [])
                if i not in holders:
                    holders.append(i)
        except ConfigError as exc:
            problems.append(exc.message)
    if problems:
        raise ConfigError("\n".join(problems))
    specs = [ListSpec(c.name, c.action, c.mode == "word", frozenset(c.applies_to))
             for c in lists]
    return Matcher(specs, words)


def read_list(path: Path, max_chars: int, normalizer: Normalizer) -> list[str]:
    """The normalised entries of one list file. Raises ConfigError naming ``file:line``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}:1: cannot read word list: {exc}") from exc
    out, problems = [], []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > max_chars:
            problems.append(f"{path}:{n}: entry of {len(line)} characters is over the limit "
                            f"of {max_chars} (content_filter.max_word_chars)")
            continue
        word = normalizer.word(line)
        if not word or len(word) > max_chars:
            problems.append(f"{path}:{n}: entry is {'empty' if not word else 'too long'} "
                            "after normalisation")
            continue
        out.append(word)
    if problems:
        raise ConfigError("\n".join(problems))
    return out
