"""Time-sensitive requests: whose right answer depends on when they are asked.

``time_sensitive(text)`` is True when the text asks about the present ("today", "now",
"currently", "latest", "this week", "right now", 今天, 现在, 目前, 最新, 本周, …), about live
values (prices, exchange rates, stock quotes, weather, scores, news, traffic; 汇率, 股价,
天气, 新闻, 比分, …) or about a relative date ("yesterday", "tomorrow", "tonight", 昨天,
明天). An answer to such a request goes stale within minutes, so the answer cache
(``cache/``) never serves one from another request (docs/gate.md "Time-sensitive
requests"). The lists are words and short phrases matched on word boundaries (Latin) or as
substrings (CJK, which has no spaces); one compiled expression, one pass, ~2 µs for a
short prompt. The detector errs on the safe side: "now" in "I know now" also counts (a
cache miss costs one engine call; a stale answer costs trust).
"""

from __future__ import annotations

import re

TIMELY_WORDS: tuple[str, ...] = (
    "today", "todays", "tonight", "now", "right now", "currently", "current", "latest",
    "newest", "recent", "recently", "this week", "this month", "this year", "yesterday",
    "tomorrow", "live", "real-time", "realtime", "breaking", "up-to-date", "up to date",
    "at the moment", "these days", "so far", "as of", "this morning", "this evening",
    "price", "prices", "exchange rate", "stock", "stocks", "share price", "quote", "weather",
    "forecast", "score", "scores", "news", "headlines", "traffic", "trending", "bitcoin",
)
"""English words and phrases (lower case; matched whole, case-insensitive)."""

TIMELY_CJK: tuple[str, ...] = (
    "今天", "今日", "今晚", "现在", "此刻", "目前", "当前", "最新", "最近", "近期", "本周",
    "这周", "本月", "这个月", "今年", "昨天", "明天", "实时", "即时", "刚刚", "眼下",
    "价格", "汇率", "股价", "股票", "行情", "报价", "天气", "预报", "新闻", "头条", "比分",
    "路况", "热搜", "币价",
)
"""Chinese words (matched as substrings)."""


def _pattern() -> re.Pattern[str]:
    latin = "|".join(re.escape(w) for w in sorted(TIMELY_WORDS, key=len, reverse=True))
    cjk = "|".join(re.escape(w) for w in TIMELY_CJK)
    return re.compile(rf"(?<![\w-])(?:{latin})(?![\w-])|{cjk}", re.IGNORECASE)


class TimelyDetector:
    """``detector(text) -> bool``: ``time_sensitive`` with the expression compiled once
    (built by the gate, not at import)."""

    __slots__ = ("_search",)

    def __init__(self) -> None:
        self._search = _pattern().search

    def __call__(self, text: str) -> bool:
        """True when ``text`` asks about the present, a live value or a relative date."""
        return self._search(text) is not None


def time_sensitive(text: str) -> bool:
    """One-off check (compiles the expression each call; the request path holds a
    ``TimelyDetector``)."""
    return TimelyDetector()(text)
