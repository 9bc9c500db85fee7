"""The facts a prompt pins down, which a cached answer must share: numbers (with their
units), named entities, code identifiers and quoted strings.

``Anchors.of(text)`` reads them once per prompt (stored with each entry, read for each
asked prompt); ``differs(stored, asked)`` names the first kind that differs, or None. A
semantic hit is refused when any differs: "convert 5 km" is not "convert 50 km", "the
capital of France" is not "the capital of Germany", ``parse_date`` is not ``parse_time``.

* numbers — digit runs (``1,000``, ``3.5``, ``1/2``) with the unit that follows (a word or
  symbol: ``5 km``, ``20%``, ``$3``, ``3岁``), English number words (one … twenty, the
  tens, hundred, thousand, million, billion, first … tenth) and Chinese numerals
  (零一二两三四五六七八九十百千万亿 runs, with the measure word after them; a lone 一 is not
  read as a number: it is mostly part of a word — 一直, 一起, 一种, 统一 — and a swap from or
  to one still shows, as the other prompt's numeral);
* entities — capitalised Latin words that do not open a sentence, or do but are not common
  sentence openers (``OPENERS``), and ALL-CAPS acronyms; in Chinese text, the words rjieba's
  part-of-speech tagger marks as person (nr), place (ns), organisation (nt), other proper
  noun (nz) or foreign word (eng);
* code — identifiers with ``_``, an inner capital (camelCase), a dot between names
  (``os.path``) or a call's ``()``, and anything in backticks;
* quotes — text between "…", '…', “…”, ‘…’, «…», 「…」 or 『…』.

Each kind is read as the sequence of its anchors in order of appearance, repeats kept.
``differs`` compares the sequences whole: "walk 3 miles … on average 3" is not "walk 3 miles
… on average 4", and "Holly influenced Elton John" is not "Elton John influenced Holly".
``differs(…, texts=(stored, asked))``, for a cache whose order verifier reads the roles
(``cache/verify.py``), leaves the order to it and compares what is pinned down: the numbers
as multisets, and the names by presence — each prompt's names found in the other's text
(whole words in any case in Latin script, anywhere in CJK), so that "In Paris, Alice met
Bob" and "Alice met Bob in Paris", or a name written "the Legislative District" in one and
"the legislative district" in the other, pin down the same facts while 法国 / 德国 do not.

A number's unit is the word or symbol right after it, lower-cased, unless that word is a
function word or a month (``NOT_UNITS``): "in 1887 to Dallas" and "in 1887 ." are one year;
in Chinese, the measure word or unit after it (``CJK_UNITS``: 1887 年, 8 名, not 到 or 的).
Chinese numerals are read as their value (第八名 and 第 8 名 are one number).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

NUMBER_WORDS = frozenset((
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy "
    "eighty ninety hundred thousand million billion trillion half dozen first second third "
    "fourth fifth sixth seventh eighth ninth tenth once twice").split())
"""English number words (lower case)."""

OPENERS = frozenset((
    "a an the what what's whats how why who whom whose when where which is are was were do "
    "does did can could would should will shall may might must please tell give explain "
    "describe write list show find make create help i i'm im you we they he she it my our "
    "your this that these those there here if in on at for to of and or but so as by with "
    "from about after before also then now today yes no hi hello hey thanks thank ok okay "
    "let let's lets compare summarize summarise translate define name calculate compute "
    "convert solve say suggest provide generate rewrite draft is it's its not any some all each "
    "every one two three his her hers their theirs its our ours these those such many most "
    "several both few another other while although though since because during until "
    "unless however therefore thus yet still only even just instead later finally first "
    "then again be keep use answer note assume consider suppose imagine given question "
    "task").split())
"""Words that open a sentence capitalised without naming anything (lower case)."""

NOT_UNITS = frozenset((
    "a an the and or but nor to of in on at by for from with as into onto than then that "
    "this these those is are was were be been being has have had do does did it its he she "
    "they we you i his her their our my your who which while when where after before during "
    "since until till per via de del la le und january february march april may june july "
    "august september october november december jan feb mar apr jun jul aug sep sept oct "
    "nov dec").split())
"""Words after a number that are not its unit (lower case): function words and months."""

CJK_UNITS = frozenset(
    "年月日号时点分秒岁周天世代届期次回遍倍个位名人口户家只头匹条根张本件项台辆架艘座层楼"
    "章节首幅部场局轮盘球分元块角毛米里克吨升度斤亩")
"""Chinese measure words and units read after a number (``3 岁``, ``8 名``); any other
character after it (到, 至, 的, 和 …) is not its unit."""

ENTITY_TAGS = frozenset({"nr", "ns", "nt", "nz", "eng", "nrt", "nrfg"})
"""rjieba (jieba) part-of-speech tags of names: person, place, organisation, other proper
noun, foreign word."""

_CJK = re.compile(r"[\u3400-\u9fff]")
_HAN_DIGITS = {ch: i for i, ch in enumerate("零一二三四五六七八九")} | {"两": 2}
_HAN_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "亿": 100_000_000}
_DIGITS = re.compile(r"(\d+(?:[.,:/]\d+)*)\s*([A-Za-z%°$€£¥]+|[\u3400-\u9fff])?")
_MONEY = re.compile(r"([$€£¥])\s*(\d+(?:[.,]\d+)*)")
_HAN_NUM = re.compile(r"([零一二两三四五六七八九十百千万亿]+)([\u3400-\u9fff]?)")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
_SENTENCE = re.compile(r"(?:^|[.!?。！？\n:：]\s*)([\"'“‘(]?)([A-Za-z][\w'’-]*)")
_CODE = re.compile(r"`([^`\n]{1,200})`|\b([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+|[A-Za-z]*_"
                   r"[\w]*|[a-z]+[A-Z]\w*|[A-Za-z_]\w*\(\))")
_QUOTED = re.compile(r"\"([^\"\n]{1,200})\"|“([^”\n]{1,200})”|‘([^’\n]{1,200})’|«([^»\n]"
                     r"{1,200})»|「([^」\n]{1,200})」|『([^』\n]{1,200})』|(?<![\w])'([^'\n]"
                     r"{1,200})'(?![\w])")


class Anchors(NamedTuple):
    """The facts of one prompt, each kind a tuple of strings in order of appearance."""

    numbers: tuple[str, ...]
    entities: tuple[str, ...]
    code: tuple[str, ...]
    quotes: tuple[str, ...]

    @classmethod
    def of(cls, text: str) -> Anchors:
        """The anchors of ``text`` (module docstring); ~20–60 µs for a short prompt."""
        return cls(_numbers(text), _entities(text), _code(text), _quotes(text))

    def as_lists(self) -> list[list[str]]:
        """One list per kind (what an entry stores)."""
        return [list(kind) for kind in self]

    @classmethod
    def from_lists(cls, lists: list[list[str]]) -> Anchors:
        """The inverse of ``as_lists``. Raises ValueError for a wrong shape."""
        if len(lists) != 4 or not all(isinstance(k, list) for k in lists):
            raise ValueError("anchors: four lists expected")
        return cls(*(tuple(str(v) for v in k) for k in lists))


KINDS = Anchors._fields
"""The refusal reason of each kind, in the order checked."""


def differs(stored: Anchors, asked: Anchors, texts: tuple[str, str] | None = None
            ) -> str | None:
    """The first kind (``numbers``, ``entities``, ``code``, ``quotes``) that differs between
    the two prompts, or None when they pin down the same facts: each kind's sequence whole,
    or with ``texts`` (the stored and the asked prompt) the numbers as multisets and the
    names by presence in the other text (module docstring)."""
    for kind, a, b in zip(KINDS, stored, asked, strict=True):
        if a == b:
            continue
        if texts is None or kind in ("code", "quotes"):
            return kind
        if kind == "numbers" and Counter(a) != Counter(b):
            return kind
        if kind == "entities" and not (_present(a, texts[1]) and _present(b, texts[0])):
            return kind
    return None


def _present(names: tuple[str, ...], text: str) -> bool:
    """Whether every name is in ``text``: anywhere when it has CJK, else as a whole word in
    any case ("the Legislative District" / "the legislative district"; "M" is not in
    "Măgheruş")."""
    lower = text.lower()
    return all(name in text if _CJK.search(name) else _whole(name.lower(), lower)
               for name in names)


def _whole(word: str, text: str) -> bool:
    """Whether ``word`` is in ``text`` with no letter, digit or ``_`` on either side."""
    start = text.find(word)
    while start >= 0:
        end = start + len(word)
        if not (start and _wordy(text[start - 1])) and not (end < len(text)
                                                            and _wordy(text[end])):
            return True
        start = text.find(word, start + 1)
    return False


def _wordy(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _numbers(text: str) -> tuple[str, ...]:
    found = [(m.start(), f"{m[1]} {_unit(m[2])}".strip()) for m in _DIGITS.finditer(text)]
    found += [(m.start(), f"{m[1]}{m[2]}") for m in _MONEY.finditer(text)]
    found += [(m.start(), m[0].lower()) for m in _WORD.finditer(text)
              if m[0].lower() in NUMBER_WORDS]
    if _CJK.search(text):
        found += [(m.start(), f"{han_value(m[1])} {_unit(m[2])}".strip())
                  for m in _HAN_NUM.finditer(text) if m[1] != "一"]
    return tuple(value for _, value in sorted(found))


def _unit(word: str | None) -> str:
    unit = (word or "").lower()
    if _CJK.match(unit):
        return unit if unit in CJK_UNITS else ""
    return "" if unit in NOT_UNITS else unit


def han_value(run: str) -> int:
    """The value of a run of Chinese numerals: 八 → 8, 二十 → 20, 三千五百万 → 35000000; a
    run without 十百千万亿 is read digit by digit (二零二三 → 2023)."""
    if not any(ch in _HAN_UNITS for ch in run):
        return int("".join(str(_HAN_DIGITS[ch]) for ch in run))
    total = section = digit = 0
    for ch in run:
        if ch in _HAN_DIGITS:
            digit = _HAN_DIGITS[ch]
        elif _HAN_UNITS[ch] < 10_000:
            section += (digit or 1) * _HAN_UNITS[ch]
            digit = 0
        else:
            total = (total + section + digit) * _HAN_UNITS[ch]
            section = digit = 0
    return total + section + digit


def _entities(text: str) -> tuple[str, ...]:
    openers = {m.start(2) for m in _SENTENCE.finditer(text)}
    found = []
    for m in _WORD.finditer(text):
        word = m[0]
        if not word[0].isupper() or word == "I":
            continue
        acronym = word.isupper() and len(word) > 1
        if m.start() in openers and not acronym and word.lower() in OPENERS:
            continue
        found.append(word)
    if _CJK.search(text):
        import rjieba  # loads its dictionary (~0.5 s): only once Chinese text is read

        found += [w for w, tag in rjieba.tag(text) if tag in ENTITY_TAGS and w.strip()]
    return tuple(found)


def _code(text: str) -> tuple[str, ...]:
    return tuple(m[1] or m[2] for m in _CODE.finditer(text) if m[1] or m[2])


def _quotes(text: str) -> tuple[str, ...]:
    return tuple(next(g for g in m.groups() if g) for m in _QUOTED.finditer(text))
