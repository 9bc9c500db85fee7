"""The polarity guard: two prompts that differ by a negation or by one side of an opposite
pair ask the opposite question, however close their vectors.

"Is it safe to mix bleach and ammonia?" and "Is it unsafe to mix bleach and ammonia?" differ
by one word (under ``wording``'s 12 % once a prompt is 9 words long) and sit at cosine 0.98
with the gate's encoder — the answer to one is wrong for the other. Bi-encoders are known to
be nearly blind to negation (Ettinger, "What BERT is not", TACL 2020; Kassner and Schütze,
"Negated and Misprimed Probes for Pretrained Language Models", ACL 2020), so the cache reads
it from the words: a pair is refused (``polarity``) when

* the counts of their polarity markers differ — negators (not, no, never, without, n't …;
  不, 没, 别, 非, 无, 未, 否) and the words of common opposite pairs (safe/unsafe,
  left/right, north/south, before/after, more/less, increase/decrease …; 左/右, 南/北,
  前/后, 多/少, 增/减, 涨/跌, 买/卖 …), counted per marker; or
* a word of one is a word of the other with a negating prefix (un-, in-, im-, il-, ir-,
  dis-, non-: likely/unlikely, legal/illegal, possible/impossible).

Markers that occur equally often in both prompts refuse nothing: a paraphrase that keeps
the question's polarity passes. Cost: one pass over the words and a ``str.count`` per
Chinese marker, ~10–20 µs a pair.
"""

from __future__ import annotations

import re
from collections import Counter

NEGATORS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor",
                      "without", "cannot", "nowhere", "isnt", "arent", "dont", "doesnt",
                      "didnt", "wont", "cant", "shouldnt", "wasnt", "werent"})
"""English negators (contractions written without the apostrophe too); every one, and every
word ending in n't, counts as one negation ("doesn't" and "does not" alike)."""
NEGATION = "<not>"

OPPOSITES = (("safe", "dangerous"), ("left", "right"), ("north", "south"), ("east", "west"),
             ("up", "down"), ("above", "below"), ("before", "after"), ("more", "less"),
             ("most", "least"), ("higher", "lower"), ("high", "low"), ("bigger", "smaller"),
             ("larger", "smaller"), ("greater", "fewer"), ("increase", "decrease"),
             ("rise", "fall"), ("maximum", "minimum"), ("max", "min"), ("first", "last"),
             ("true", "false"), ("open", "close"), ("win", "lose"), ("buy", "sell"),
             ("hot", "cold"), ("yes", "no"), ("positive", "negative"), ("add", "remove"),
             ("inside", "outside"), ("upper", "lower"), ("earlier", "later"),
             ("faster", "slower"), ("heavier", "lighter"), ("cheaper", "dearer"),
             ("better", "worse"), ("best", "worst"), ("allow", "forbid"),
             ("accept", "reject"), ("import", "export"), ("input", "output"),
             ("minimise", "maximise"), ("minimize", "maximize"), ("ascending", "descending"))
"""Common English opposite pairs; each word is a marker of its own."""

POLES = frozenset(w for pair in OPPOSITES for w in pair)

CJK_MARKERS = ("不", "没", "别", "非", "无", "未", "否", "左", "右", "南", "北", "东", "西",
               "前", "后", "多", "少", "增", "减", "涨", "跌", "买", "卖", "高", "低", "早",
               "晚", "赢", "输", "胜", "负", "冷", "热", "真", "假", "最大", "最小", "升序",
               "降序", "安全", "危险", "以上", "以下")
"""Chinese negators and sides of opposite pairs, counted as substrings (a Chinese prompt has
no spaces to split words at)."""

PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non")
"""English prefixes that turn a word into its opposite."""

_LATIN = re.compile(r"[a-z]+(?:['’][a-z]+)?")


def read(text: str) -> tuple[Counter[str], set[str]]:
    """``text``'s polarity markers with how often each occurs (module docstring), and its
    lower-cased Latin words (for the prefix rule); the text is tokenised once."""
    tokens = _LATIN.findall(text.lower())
    found: Counter[str] = Counter()
    for token in tokens:
        word = token.replace("'", "").replace("’", "")
        if word in NEGATORS or word != token and word.endswith("nt"):
            found[NEGATION] += 1
        elif word in POLES:
            found[word] += 1
    for m in CJK_MARKERS:
        n = text.count(m)
        if n:
            found[m] = n
    return found, set(tokens)


def flipped(stored: str, asked: str) -> bool:
    """Whether ``asked`` may ask the opposite of ``stored`` (module docstring)."""
    (marks_a, a), (marks_b, b) = read(stored), read(asked)
    if marks_a != marks_b:
        return True
    only_a, only_b = a - b, b - a
    return any(p + w in only_b for w in only_a for p in PREFIXES) or \
        any(p + w in only_a for w in only_b for p in PREFIXES)
