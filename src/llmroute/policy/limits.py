"""Admission: concurrency, RPM/TPM, token quotas and cost budgets of a key and its tenant,
all at once.

``Limiter.admit`` takes, in one atomic state-store call (``StateStore.admit``), the
concurrency leases (key, tenant), one request on each RPM bucket and the request's token
reservation (prompt tokens + ``max_tokens``, else ``limits.default_max_tokens``) on each
TPM bucket and daily/monthly quota counter: everything fits and is taken, or nothing is
(429; a full lease refuses first). The ``Ticket`` it returns carries the
``x-ratelimit-*`` headers and, when the answer ends, ``settle(used, cost)`` moves the token
charges by ``used - reserved`` (an early stop gives tokens back; a longer answer charges
the difference) and releases the leases — once, in one call, and in none when usage
matches the reservation and no lease is held. With Redis state an admitted request thus
costs one round trip in and at most one out.

Cost budgets (``daily_cost``, ``monthly_cost``) are quota counters of money, in the
pools' price unit, kept in the same state store (fleet-wide with Redis) and taken in the
same call. A request's cost is known only once it is answered (its pool, its real usage),
so admission holds ``COST_HOLD`` on each budget — refused, ``insufficient_quota``, once
the spend has reached the budget — and ``settle`` charges the request's real cost
(``Recorder.spent``). A budget that runs out while requests are in flight ends none of
them: their cost is charged when they end (the spend may pass the budget by what they
cost), and the next request is refused. ``Ticket.budget_left`` is the smallest fraction
(0–1) of the caller's cost budgets left at admission, which the ``budget_left_below``
strategy trigger reads.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

from llmroute.config.policy import LimitsConfig
from llmroute.errors import RateLimited
from llmroute.policy.auth import Caller
from llmroute.policy.keys import Limits
from llmroute.state.protocol import Bucket, Charges, Counter, Grant, Lease, StateStore
from llmroute.types import ChatRequest

PLANS = 4096
"""Callers (key, tenant) whose limit objects are kept built; past it the least recently
used goes."""
_WHAT = {"rpm": "requests per minute", "tpm": "tokens per minute",
         "daily_tokens": "daily token quota", "monthly_tokens": "monthly token quota",
         "daily_cost": "daily cost budget", "monthly_cost": "monthly cost budget"}
PERIODS_EVERY_S = 1.0
"""How long (s) a plan's quota counters, once named for the UTC day and month, are kept
before the clock is read against the periods again (``Limiter._limits_now``)."""
COST_HOLD = 1e-9
"""Currency units a cost budget is charged at admission, so a budget whose spend has
reached it refuses (a counter refuses when spend + charge passes its limit); ``settle``
charges the real cost less this."""
REQUESTS, TOKENS, MONEY = 0, 1, 2
"""What a charge counts: one per request (RPM), the request's tokens, its cost."""


class Ticket:
    """An admitted request's reservation: ``headers`` (``x-ratelimit-*``), ``reserved``
    tokens, ``budget_left`` (the smallest fraction 0–1 of its cost budgets left; None
    without one); ``settle`` once when the answer ends."""

    __slots__ = ("_store", "_charges", "_costed", "_priced", "_leases", "reserved", "headers",
                 "settled", "budget_left")

    def __init__(self, store: StateStore, charges: Charges, costed: Sequence[int],
                 leases: Sequence[tuple[str, str]], reserved: int, headers: dict[str, str],
                 priced: Sequence[int] = (), budget_left: float | None = None):
        self._store, self._charges, self._costed = store, charges, costed
        self._leases, self.reserved, self.headers = leases, reserved, headers
        self._priced, self.budget_left = priced, budget_left
        self.settled = False

    async def settle(self, used: int | None, cost: float | None = None) -> None:
        """Reconcile with ``used`` tokens (None: nothing was served, every reserved token
        goes back) and the request's ``cost`` (currency units; None: nothing spent) and
        release the leases, in one state-store call — none when usage matches the
        reservation, no cost budget applies and no lease is held; later calls do
        nothing."""
        if self.settled:
            return
        self.settled = True
        delta = (used or 0) - self.reserved
        charges = self._charges
        moved = [(charges[i][0], delta) for i in self._costed] if delta else []
        if self._priced:
            spend = (cost or 0.0) - COST_HOLD
            moved += [(charges[i][0], spend) for i in self._priced]
        if moved or self._leases:
            await self._store.settle(moved, self._leases)


class Limiter:
    """Admission over ``store`` (module docstring); ``wall_clock`` (epoch s) places the
    quota days and months (UTC)."""

    def __init__(self, store: StateStore, config: LimitsConfig,
                 wall_clock: Callable[[], float]):
        self._store, self._config, self._wall = store, config, wall_clock
        self._plans: LRUCache[tuple[str, str], _Plan] = LRUCache(PLANS)
        self._periods = _Periods()

    async def admit(self, caller: Caller, request: ChatRequest) -> Ticket:
        """The request's Ticket. Raises RateLimited (429: ``rate_limit_exceeded`` with
        ``Retry-After`` from the buckets, or ``insufficient_quota``)."""
        cost = request.prompt_tokens + (request.max_tokens or self._config.default_max_tokens)
        plan = self._plan(caller)
        charges = self._charges(plan, cost)
        grant = await self._store.admit(charges, plan.lease_limits)
        if grant.full is not None:
            scope, owner, lease = plan.leases[grant.full]
            raise RateLimited(f"Too many requests in flight for {scope} {owner}: the limit "
                              f"is {lease.limit} at once.", retry_after_s=1.0, kind="requests")
        headers = plan.headers(grant.flat_levels)
        if not grant.allowed:
            raise _refusal(caller, charges, plan.what, grant, headers)
        held = tuple(zip(plan.lease_names, grant.lease_ids))
        left = _budget_left(charges, plan.priced, grant.flat_levels) if plan.priced else None
        return Ticket(self._store, charges, plan.costed, held, cost, headers, plan.priced,
                      left)

    def _plan(self, caller: Caller) -> _Plan:
        """The caller's limit objects, built once per key and tenant and again when their
        limits change (the same Limits objects: no comparison of their fields)."""
        key, tenant = caller.key, caller.tenant
        ids = (key.id, tenant.id)
        try:  # cachetools' get() is a __contains__ and a __getitem__: two calls more
            plan = self._plans[ids]
        except KeyError:
            plan = None
        if plan is None or not plan.made_for(key.limits, tenant.limits):
            plan = self._plans[ids] = _build_plan(caller, self._config.lease_ttl_s)
        return plan

    def _charges(self, plan: _Plan, cost: int) -> list[tuple[Bucket | Counter, float]]:
        """The charges of one request, in ``plan.what`` order: 1 on each RPM bucket,
        ``cost`` tokens on each TPM bucket and token quota, ``COST_HOLD`` on each cost
        budget (``_limits_now``)."""
        limits = self._limits_now(plan) if plan.quotas else plan.limits
        amounts = (1, cost, COST_HOLD)
        return [(limit, amounts[unit])  # type: ignore[misc]
                for limit, unit in zip(limits, plan.units)]

    def _limits_now(self, plan: _Plan) -> tuple[Bucket | Counter, ...]:
        """``plan.limits`` with each quota's Counter named by the UTC day or month now and
        lasting to its end (at least 1 s). Worked out at most once per ``PERIODS_EVERY_S`` per plan (kept
        in ``plan.now``, and again as a period ends): a counter first charged within that
        second may outlive its period by under a second, unread, as the next period's
        counter has another name."""
        now = self._wall()
        since, until, limits = plan.now
        if since <= now < until:
            return limits
        when = self._periods.at(now)
        out: list[Bucket | Counter] = []
        until = now + PERIODS_EVERY_S
        for limit in plan.limits:
            if type(limit) is _Quota:
                stamp, end = when[limit.period]
                ttl = end - now
                out.append(Counter(f"{limit.kind}:{limit.stem}:{stamp}", limit.limit,
                                   ttl if ttl >= 1.0 else 1.0))
                until = min(until, end)
            else:
                out.append(limit)  # type: ignore[arg-type]
        limits = tuple(out)
        plan.now[:] = (now, until, limits)
        return limits


@dataclass(frozen=True, slots=True)
class _Quota:
    """A daily (``period`` ``qd``) or monthly (``qm``) quota of ``limit`` units — tokens
    (``kind`` ``qd``/``qm``) or money (``cd``/``cm``) — whose Counter is named
    ``kind:stem:<day or month>`` at each call."""

    kind: str
    stem: str
    limit: float
    period: str


_Rate = tuple[tuple[int, ...], tuple[str, ...], tuple[str, str, str]]
"""One unit's ``x-ratelimit-*`` headers: where its buckets' levels start in
``Grant.flat_levels`` (key's, tenant's: twice the charge's index), their capacities as the
``limit`` header writes them, and the three header names."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """A caller's limits as state-store objects: per charge ``what`` (scope, limit name),
    ``limits`` (a Bucket, or a _Quota) and ``units`` (``REQUESTS``: costs 1, an RPM bucket;
    ``TOKENS``: the request's tokens; ``MONEY``: a cost budget); ``leases``: (scope,
    owner, Lease), and apart their ``lease_limits`` and ``lease_names``; ``costed``: the
    indices of the token charges and ``priced`` of the cost budgets (a settle moves
    them); ``rates``: what the ``x-ratelimit-*`` headers read, for requests
    (RPM) and tokens (TPM) when the key or tenant has such a bucket; ``quotas``: whether a
    limit is a _Quota; ``sources``: the key's and tenant's Limits it was built from;
    ``now``: ``Limiter._limits_now``'s ``[since, until, limits]`` (epoch s)."""

    what: tuple[tuple[str, str], ...]
    limits: tuple[Bucket | _Quota, ...]
    units: tuple[int, ...]
    leases: tuple[tuple[str, str, Lease], ...]
    lease_limits: tuple[Lease, ...]
    lease_names: tuple[str, ...]
    costed: tuple[int, ...]
    priced: tuple[int, ...]
    rates: tuple[_Rate, ...]
    quotas: bool
    sources: tuple[Limits, Limits]
    now: list[Any] = field(default_factory=lambda: [0.0, 0.0, ()], compare=False)

    def made_for(self, key: Limits, tenant: Limits) -> bool:
        """Whether the plan was built from these limits (identity first, then equality)."""
        k, t = self.sources
        return (k is key or k == key) and (t is tenant or t == tenant)

    def headers(self, levels: Sequence[float]) -> dict[str, str]:
        """OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` after a call
        that gave ``levels`` (``Grant.flat_levels``) from the tighter (fewer remaining; the
        first of equals) of the key's and tenant's RPM and TPM buckets; absent without
        one."""
        out: dict[str, str] = {}
        for at, caps, (limit_h, remaining_h, reset_h) in self.rates:
            i, cap = at[0], caps[0]
            if len(at) == 2 and levels[at[1]] < levels[i]:  # the tenant's is tighter
                i, cap = at[1], caps[1]
            left = int(levels[i])
            out[limit_h] = cap
            out[remaining_h] = str(left) if left > 0 else "0"
            out[reset_h] = _duration(levels[i + 1])
        return out


def _build_plan(caller: Caller, lease_ttl_s: float) -> _Plan:
    tag = f"{{{caller.tenant.id}}}"  # one Redis hash slot for all the names of a call
    what: list[tuple[str, str]] = []
    limits: list[Bucket | _Quota] = []
    leases = []
    for scope, owner, lim in _scopes(caller):
        at = f"{scope}:{tag}:{owner}"
        for name, limit in (("rpm", lim.rpm and Bucket(f"rpm:{at}", lim.rpm, 60.0)),
                            ("tpm", lim.tpm and Bucket(f"tpm:{at}", lim.tpm, 60.0)),
                            ("daily_tokens", lim.daily_tokens and _Quota(
                                "qd", at, lim.daily_tokens, "qd")),
                            ("monthly_tokens", lim.monthly_tokens and _Quota(
                                "qm", at, lim.monthly_tokens, "qm")),
                            ("daily_cost", lim.daily_cost and _Quota(
                                "cd", at, lim.daily_cost, "qd")),
                            ("monthly_cost", lim.monthly_cost and _Quota(
                                "cm", at, lim.monthly_cost, "qm"))):
            if limit:
                what.append((scope, name))
                limits.append(limit)
        if lim.max_concurrency is not None:
            leases.append((scope, owner, Lease(f"conc:{at}", lim.max_concurrency, lease_ttl_s)))
    units = tuple(_unit(name) for _, name in what)
    return _Plan(tuple(what), tuple(limits), units,
                 tuple(leases), tuple(lease for _, _, lease in leases),
                 tuple(lease.name for _, _, lease in leases),
                 tuple(i for i, u in enumerate(units) if u == TOKENS),
                 tuple(i for i, u in enumerate(units) if u == MONEY),
                 _rates(what, limits), any(type(x) is _Quota for x in limits),
                 (caller.key.limits, caller.tenant.limits))


def _unit(name: str) -> int:
    """What the limit ``name`` counts (``REQUESTS``, ``TOKENS`` or ``MONEY``)."""
    return REQUESTS if name == "rpm" else MONEY if name.endswith("_cost") else TOKENS


def _budget_left(charges: Charges, priced: Sequence[int], levels: Sequence[float]) -> float:
    """The smallest fraction (0–1) of the cost budgets at ``priced`` left after a grant
    (``levels``: ``Grant.flat_levels``)."""
    return min(max(levels[2 * i] / charges[i][0].limit, 0.0)  # type: ignore[union-attr]
               for i in priced)


def _rates(what: list[tuple[str, str]], limits: list[Bucket | _Quota]) -> tuple[_Rate, ...]:
    out = []
    for name, unit in (("rpm", "requests"), ("tpm", "tokens")):
        at = tuple(2 * i for i, w in enumerate(what) if w[1] == name)
        if at:
            caps = tuple(str(int(limits[i // 2].capacity)) for i in at)  # type: ignore[union-attr]
            out.append((at, caps, (f"x-ratelimit-limit-{unit}",
                                   f"x-ratelimit-remaining-{unit}", f"x-ratelimit-reset-{unit}")))
    return tuple(out)


def _scopes(caller: Caller) -> tuple[tuple[str, str, Limits], ...]:
    return (("key", caller.key.id, caller.key.limits),
            ("tenant", caller.tenant.id, caller.tenant.limits))


def _refusal(caller: Caller, charges: Charges, what: Sequence[tuple[str, str]],
             grant: Grant, headers: dict[str, str]) -> RateLimited:
    i = grant.denied or 0
    scope, name = what[i]
    owner = caller.key.display if scope == "key" else f"tenant {caller.tenant.id}"
    limit, cost = charges[i]
    if name.endswith("_cost"):
        return _spent(owner, name, limit.limit, grant, headers)  # type: ignore[union-attr]
    cap = int(limit.capacity if isinstance(limit, Bucket) else limit.limit)
    if grant.retry_after_s is None:
        message = (f"Request too large for {owner}: it needs {cost:g} tokens, the "
                   f"{_WHAT[name]} is {cap}.")
    else:
        message = (f"Rate limit reached for {owner} on {_WHAT[name]}: limit {cap}. Please "
                   f"try again in {_duration(grant.retry_after_s)}.")
    code = "insufficient_quota" if name.endswith("_tokens") else None
    return RateLimited(message, retry_after_s=grant.retry_after_s, code=code,
                       kind="tokens" if name != "rpm" else "requests", headers=headers)


def _spent(owner: str, name: str, budget: float, grant: Grant,
           headers: dict[str, str]) -> RateLimited:
    """The refusal of a spent cost budget: 429 ``insufficient_quota``, ``Retry-After`` the
    seconds to the end of its UTC day or month."""
    spent = budget - grant.flat_levels[2 * (grant.denied or 0)]
    message = (f"You exceeded your current quota: {owner} has spent {spent:.6g} of its "
               f"{_WHAT[name]} of {budget:g}.")
    if grant.retry_after_s is not None:
        message += f" It resets in {_duration(grant.retry_after_s)}."
    return RateLimited(message, retry_after_s=grant.retry_after_s, code="insufficient_quota",
                       kind="tokens", headers=headers)


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
        self._when: dict[str, tuple[str, float]] = {}

    def at(self, now: float) -> dict[str, tuple[str, float]]:
        """``{"qd": (day stamp, epoch s the next UTC day starts), "qm": (month stamp,
        epoch s the next UTC month starts)}`` for ``now`` (epoch s)."""
        if not self._start <= now < self._end:
            utc = time.gmtime(now)
            self._start = now - now % 86400.0
            self._end = self._start + 86400.0
            self._when = {"qd": (time.strftime("%Y%m%d", utc), self._end),
                          "qm": (time.strftime("%Y%m", utc), now + _to_next_month(now))}
        return self._when


def _to_next_month(now: float) -> float:
    t = time.gmtime(now)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return max(calendar.timegm((year, month, 1, 0, 0, 0)) - now, 1.0)
