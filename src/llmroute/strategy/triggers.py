"""``when`` compiled once at load into a Trigger: the intent labels the index files it under,
and a tuple of cheap checks (regexes compiled; keywords case-folded into one Aho–Corasick
automaton per strategy, run over the request's case-folded text, which is folded once per
request however many strategies ask).

Tenant, API-key name and priority class are read from the ``Asker``: with auth on, the
authenticated caller's (the pipeline builds it; headers a client sends cannot change it);
with auth off, the request headers named below.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import NamedTuple

import ahocorasick

from llmroute.strategy.spec import Range, When
from llmroute.types import ChatRequest, Intent

TENANT_HEADER = "x-llmroute-tenant"
API_KEY_HEADER = "x-llmroute-api-key-name"
PRIORITY_HEADER = "x-llmroute-priority"


class Asker(NamedTuple):
    """Who asks, as the ``tenant`` / ``api_key`` / ``priority_class`` /
    ``budget_left_below`` triggers and a split's stickiness read it: the ``tenant`` id, the
    key's ``api_key`` name, the ``priority`` class name, the ``key_id`` and ``budget_left``
    (the smallest fraction 0–1 of the caller's cost budgets left; None: not known, or no
    budget). A NamedTuple: one is made per request with auth on."""

    tenant: str | None = None
    api_key: str | None = None
    priority: str | None = None
    key_id: str | None = None
    budget_left: float | None = None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Asker:
        """The header fallback (auth off): the values of the headers named above."""
        return cls(headers.get(TENANT_HEADER), headers.get(API_KEY_HEADER),
                   headers.get(PRIORITY_HEADER))


NOBODY = Asker()
"""The asker of a request nobody authenticated while auth is on (no trigger holds for it)."""


class Facts:
    """What a trigger reads: the ``request``, the gate's ``intent``, the request's
    ``headers`` (lower-case names, or a case-insensitive mapping) and the ``asker`` (None:
    read from ``headers``); ``folded`` is the prompt text case-folded, worked out once per
    request on first use (keyword checks)."""

    __slots__ = ("request", "intent", "headers", "asker", "_folded")

    def __init__(self, request: ChatRequest, intent: Intent, headers: Mapping[str, str],
                 asker: Asker | None = None):
        self.request, self.intent, self.headers = request, intent, headers
        self.asker = Asker.from_headers(headers) if asker is None else asker
        self._folded: str | None = None

    @property
    def folded(self) -> str:
        """``request.text.casefold()``, computed once."""
        if self._folded is None:
            self._folded = self.request.text.casefold()
        return self._folded


Check = Callable[[Facts], bool]


@dataclass(frozen=True, slots=True)
class Trigger:
    """A compiled ``when``: ``labels`` (empty: any intent) are checked by the index; every
    check in ``checks`` must hold."""

    labels: frozenset[str]
    checks: tuple[Check, ...]

    def holds(self, facts: Facts) -> bool:
        """True when every check holds (the labels are the caller's to check)."""
        return all(check(facts) for check in self.checks)


def compile_when(when: When) -> Trigger:
    """The Trigger of ``when``; the cheap checks come first so most misses stop early."""
    checks = [*_value_checks(when), *_header_checks(when), *_text_checks(when)]
    return Trigger(frozenset(when.intents), tuple(checks))


def _value_checks(when: When) -> list[Check]:
    checks: list[Check] = []
    if when.composite is not None:
        wanted = when.composite
        checks.append(lambda f: f.intent.is_composite is wanted)
    if when.conflict_above is not None:
        above = when.conflict_above
        checks.append(lambda f: f.intent.conflict > above)
    if when.confidence_below is not None:
        below = when.confidence_below
        checks.append(lambda f: f.intent.confidence < below)
    if when.budget_left_below is not None:
        checks.append(_budget_below(when.budget_left_below))
    if when.model:
        models = frozenset(when.model)
        checks.append(lambda f: f.request.model in models)
    for bounds, read in ((when.complexity, _complexity), (when.prompt_tokens, _tokens)):
        if bounds is not None:
            checks.append(_within(bounds, read))
    return checks


def _budget_below(fraction: float) -> Check:
    """True when the caller has a cost budget and less than ``fraction`` of it is left."""
    def check(f: Facts) -> bool:
        left = f.asker.budget_left
        return left is not None and left < fraction
    return check


def _complexity(f: Facts) -> float:
    return f.intent.complexity


def _tokens(f: Facts) -> float:
    return f.request.prompt_tokens


def _header_checks(when: When) -> list[Check]:
    checks: list[Check] = []
    for field, values in (("tenant", when.tenant), ("api_key", when.api_key),
                          ("priority", when.priority_class)):
        if values:
            checks.append(_asker_in(field, frozenset(values)))
    for name, pattern in when.headers.items():
        checks.append(_header_matches(name, re.compile(pattern)))
    return checks


def _text_checks(when: When) -> list[Check]:
    checks: list[Check] = []
    if when.keywords:
        checks.append(_any_word(w.casefold() for w in when.keywords))
    if when.regex is not None:
        pattern = re.compile(when.regex)
        checks.append(lambda f: pattern.search(f.request.text) is not None)
    return checks


def _any_word(words: Iterable[str]) -> Check:
    """True when the request's case-folded text contains one of ``words`` (case-folded):
    one Aho–Corasick automaton (pyahocorasick) built here, one pass over the text per request
    that stops at the first hit, whatever the number of words."""
    automaton = ahocorasick.Automaton()
    for word in dict.fromkeys(w for w in words if w):
        automaton.add_word(word, word)
    if len(automaton) == 0:
        return lambda f: False
    automaton.make_automaton()
    return lambda f: next(automaton.iter(f.folded), None) is not None


def _within(r: Range, read: Callable[[Facts], float]) -> Check:
    low = float("-inf") if r.min is None else r.min
    high = float("inf") if r.max is None else r.max
    return lambda f: low <= read(f) <= high


def _asker_in(field: str, values: frozenset[str]) -> Check:
    read = attrgetter(field)
    return lambda f: read(f.asker) in values


def _header_matches(name: str, pattern: re.Pattern[str]) -> Check:
    def check(f: Facts) -> bool:
        value = f.headers.get(name)
        return value is not None and pattern.search(value) is not None
    return check
