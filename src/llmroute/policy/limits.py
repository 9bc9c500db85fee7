"""Admission: concurrency, RPM/TPM and token quotas of a key and its tenant, all at once.

``Limiter.admit`` takes, in one atomic state-store call (``StateStore.admit``), the
concurrency leases (key, tenant), one request on each RPM bucket and the request's token
reservation (prompt tokens + ``max_tokens``, else ``limits.default_max_tokens``) on each
TPM bucket and daily/monthly quota counter: everything fits and is taken, or nothing is
(429; a full lease refuses first). The ``Ticket`` it returns carries the
``x-ratelimit-*`` headers and, when the answer ends, ``settle(used)`` moves the token
charges by ``used - reserved`` (an early stop gives tokens back; a longer answer charges
the difference) and releases the leases — once, in one call, and in none when usage
matches the reservation and no lease is held. With Redis state an admitted request thus
costs one round trip in and at most one out.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cachetools import LRUCache

from llmroute.config_policy import LimitsConfig
from llmroute.errors import RateLimited
from llmroute.policy.auth import Caller
from llmroute.policy.keys import Limits
from llmroute.state.protocol import (Bucket, Charge, Counter, Grant, Lease, Level,
                                     StateStore)
from llmroute.types import ChatRequest

PLANS = 4096
"""Callers (key, tenant, limits) whose limit objects are kept built."""
_WHAT = {"rpm": "requests per minute", "tpm": "tokens per minute",
         "daily_tokens": "daily token quota", "monthly_tokens": "monthly token quota"}


class Ticket:
    """An admitted request's reservation: ``headers`` (``x-ratelimit-*``), ``reserved``
    tokens; ``settle`` once when the answer ends."""

    def __init__(self, store: StateStore, tokens: Sequence[Charge], leases: list[tuple[str, str]],
                 reserved: int, headers: dict[str, str]):
        self._store, self._tokens, self._leases = store, tokens, leases
        self.reserved, self.headers = reserved, headers
        self.settled = False

    async def settle(self, used: int | None) -> None:
        """Reconcile with ``used`` tokens (None: nothing was served, every reserved token
        goes back) and release the leases, in one state-store call — none when usage
        matches the reservation and no lease is held; later calls do nothing."""
        if self.settled:
            return
        self.settled = True
        delta = (used or 0) - self.reserved
        charges = [Charge(c.limit, delta) for c in self._tokens] if delta else []
        if charges or self._leases:
            await self._store.settle(charges, self._leases)


class Limiter:
    """Admission over ``store`` (module docstring); ``wall_clock`` (epoch s) places the
    quota days and months (UTC)."""

    def __init__(self, store: StateStore, config: LimitsConfig,
                 wall_clock: Callable[[], float]):
        self._store, self._config, self._wall = store, config, wall_clock
        self._plans: LRUCache[tuple[object, ...], _Plan] = LRUCache(PLANS)
        self._periods = _Periods()

    async def admit(self, caller: Caller, request: ChatRequest) -> Ticket:
        """The request's Ticket. Raises RateLimited (429: ``rate_limit_exceeded`` with
        ``Retry-After`` from the buckets, or ``insufficient_quota``)."""
        cost = request.prompt_tokens + (request.max_tokens or self._config.default_max_tokens)
        plan = self._plan(caller)
        charges, what, leases = self._charges(plan, cost), plan.what, plan.leases
        grant = await self._store.admit(charges, [lease for _, _, lease in leases])
        if grant.full is not None:
            scope, owner, lease = leases[grant.full]
            raise RateLimited(f"Too many requests in flight for {scope} {owner}: the limit "
                              f"is {lease.limit} at once.", retry_after_s=1.0, kind="requests")
        headers = rate_headers(charges, what, grant.levels)
        if not grant.allowed:
            raise _refusal(caller, charges, what, grant, headers)
        tokens = [c for c, w in zip(charges, what) if w[1] != "rpm"]
        held = [(lease.name, lid) for (_, _, lease), lid in zip(leases, grant.lease_ids)]
        return Ticket(self._store, tokens, held, cost, headers)

    def _plan(self, caller: Caller) -> _Plan:
        """The caller's limit objects, built once per key and tenant and again when their
        limits change (the same Limits objects: no comparison of their fields)."""
        key, tenant = caller.key, caller.tenant
        plan = self._plans.get((key.id, tenant.id))
        if plan is None or not plan.made_for(key.limits, tenant.limits):
            plan = self._plans[key.id, tenant.id] = _build_plan(caller,
                                                                self._config.lease_ttl_s)
        return plan

    def _charges(self, plan: _Plan, cost: int) -> list[Charge]:
        """The charges of one request, in ``plan.what`` order."""
        if not plan.quotas:
            return [Charge(limit, 1 if w[1] == "rpm" else cost)
                    for w, limit in zip(plan.what, plan.limits)]
        when = self._periods.at(self._wall())
        out = []
        for w, limit in zip(plan.what, plan.limits):
            if isinstance(limit, tuple):  # a quota: (kind, name stem, limit)
                stamp, ttl = when[limit[0]]
                limit = Counter(f"{limit[0]}:{limit[1]}:{stamp}", limit[2], ttl)
            out.append(Charge(limit, 1 if w[1] == "rpm" else cost))
        return out


@dataclass(frozen=True, slots=True)
class _Plan:
    """A caller's limits as state-store objects: per charge ``what`` (scope, limit name)
    and ``limits`` (a Bucket, or a quota's ``(kind, name stem, limit)`` whose Counter is
    named by the day or month at each call); ``leases``: (scope, owner, Lease)."""

    what: tuple[tuple[str, str], ...]
    limits: tuple[Bucket | tuple[str, str, int], ...]
    leases: tuple[tuple[str, str, Lease], ...]
    quotas: bool
    sources: tuple[Limits, Limits]

    def made_for(self, key: Limits, tenant: Limits) -> bool:
        """Whether the plan was built from these limits (identity first, then equality)."""
        k, t = self.sources
        return (k is key or k == key) and (t is tenant or t == tenant)


def _build_plan(caller: Caller, lease_ttl_s: float) -> _Plan:
    tag = f"{{{caller.tenant.id}}}"  # one Redis hash slot for all the names of a call
    what: list[tuple[str, str]] = []
    limits: list[Bucket | tuple[str, str, int]] = []
    leases = []
    for scope, owner, lim in _scopes(caller):
        at = f"{scope}:{tag}:{owner}"
        for name, limit in (("rpm", lim.rpm and Bucket(f"rpm:{at}", lim.rpm, 60.0)),
                            ("tpm", lim.tpm and Bucket(f"tpm:{at}", lim.tpm, 60.0)),
                            ("daily_tokens", lim.daily_tokens and ("qd", at, lim.daily_tokens)),
                            ("monthly_tokens", lim.monthly_tokens and (
                                "qm", at, lim.monthly_tokens))):
            if limit:
                what.append((scope, name))
                limits.append(limit)
        if lim.max_concurrency is not None:
            leases.append((scope, owner, Lease(f"conc:{at}", lim.max_concurrency, lease_ttl_s)))
    return _Plan(tuple(what), tuple(limits), tuple(leases),
                 any(isinstance(x, tuple) for x in limits),
                 (caller.key.limits, caller.tenant.limits))


def _scopes(caller: Caller) -> tuple[tuple[str, str, Limits], ...]:
    return (("key", caller.key.id, caller.key.limits),
            ("tenant", caller.tenant.id, caller.tenant.limits))


def _refusal(caller: Caller, charges: list[Charge], what: list[tuple[str, str]], grant: Grant,
             headers: dict[str, str]) -> RateLimited:
    i = grant.denied or 0
    scope, name = what[i]
    owner = caller.key.display if scope == "key" else f"tenant {caller.tenant.id}"
    limit = charges[i].limit
    cap = int(limit.capacity if isinstance(limit, Bucket) else limit.limit)
    if grant.retry_after_s is None:
        message = (f"Request too large for {owner}: it needs {charges[i].cost:g} tokens, the "
                   f"{_WHAT[name]} is {cap}.")
    else:
        message = (f"Rate limit reached for {owner} on {_WHAT[name]}: limit {cap}. Please "
                   f"try again in {_duration(grant.retry_after_s)}.")
    code = "insufficient_quota" if name.endswith("_tokens") else None
    return RateLimited(message, retry_after_s=grant.retry_after_s, code=code,
                       kind="tokens" if name != "rpm" else "requests", headers=headers)


def rate_headers(charges: Sequence[Charge], what: Sequence[tuple[str, str]],
                 levels: Sequence[Level]) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` from the tighter
    (fewer remaining) of the key's and tenant's RPM and TPM buckets; absent without one."""
    out: dict[str, str] = {}
    for name, unit in (("rpm", "requests"), ("tpm", "tokens")):
        found = [(lv, c.limit) for c, w, lv in zip(charges, what, levels) if w[1] == name]
        if not found:
            continue
        level, limit = min(found, key=lambda f: f[0].remaining)
        assert isinstance(limit, Bucket)
        out[f"x-ratelimit-limit-{unit}"] = str(int(limit.capacity))
        out[f"x-ratelimit-remaining-{unit}"] = str(max(0, int(level.remaining)))
        out[f"x-ratelimit-reset-{unit}"] = _duration(level.reset_s)
    return out


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``17ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1.0:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60.0)
    rest_s = f"{math.ceil(rest * 10) / 10:g}s"
    return f"{int(minutes)}m{rest_s}" if minutes else rest_s


class _Periods:
    """The UTC day and month a wall-clock instant falls in, as the quota counters name them
    (``%Y%m%d``, ``%Y%m``), worked out once per day rather than per request."""

    def __init__(self) -> None:
        self._start = self._end = 0.0
        self._stamps = ("", "")
        self._month_end = 0.0

    def at(self, now: float) -> dict[str, tuple[str, float]]:
        """``{"qd": (day stamp, s to the next UTC day), "qm": (month stamp, s to the next
        UTC month)}`` at ``now`` (epoch s); each wait at least 1 s."""
        if not self._start <= now < self._end:
            utc = time.gmtime(now)
            self._start = now - now % 86400.0
            self._end = self._start + 86400.0
            self._stamps = (time.strftime("%Y%m%d", utc), time.strftime("%Y%m", utc))
            self._month_end = now + _to_next_month(now)
        return {"qd": (self._stamps[0], max(self._end - now, 1.0)),
                "qm": (self._stamps[1], max(self._month_end - now, 1.0))}


def _to_next_month(now: float) -> float:
    t = time.gmtime(now)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return max(calendar.timegm((year, month, 1, 0, 0, 0)) - now, 1.0)
