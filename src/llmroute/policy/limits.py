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

from llmroute.config_policy import LimitsConfig
from llmroute.errors import RateLimited
from llmroute.policy.auth import Caller
from llmroute.policy.keys import Limits
from llmroute.state.protocol import (Bucket, Charge, Counter, Grant, Lease, Level,
                                     StateStore)
from llmroute.types import ChatRequest

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

    async def admit(self, caller: Caller, request: ChatRequest) -> Ticket:
        """The request's Ticket. Raises RateLimited (429: ``rate_limit_exceeded`` with
        ``Retry-After`` from the buckets, or ``insufficient_quota``)."""
        cost = request.prompt_tokens + (request.max_tokens or self._config.default_max_tokens)
        charges, what = self._charges(caller, cost)
        leases = self._leases(caller)
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

    def _leases(self, caller: Caller) -> list[tuple[str, str, Lease]]:
        """``(scope, owner, lease)`` per concurrency limit of the key and its tenant (lease
        names carry the tenant's hash tag, as the charges' do)."""
        tag = f"{{{caller.tenant.id}}}"
        return [(scope, owner, Lease(f"conc:{scope}:{tag}:{owner}", limits.max_concurrency,
                                     self._config.lease_ttl_s))
                for scope, owner, limits in _scopes(caller) if limits.max_concurrency is not None]

    def _charges(self, caller: Caller, cost: int) -> tuple[list[Charge], list[tuple[str, str]]]:
        """The charges of one request and, per charge, ``(scope, limit name)``."""
        now = self._wall()
        utc = time.gmtime(now)
        day, month = time.strftime("%Y%m%d", utc), time.strftime("%Y%m", utc)
        charges: list[Charge] = []
        what: list[tuple[str, str]] = []
        tag = f"{{{caller.tenant.id}}}"  # one Redis hash slot for all the charges of a call
        for scope, owner, lim in _scopes(caller):
            at = f"{scope}:{tag}:{owner}"
            for name, value, limit in (
                    ("rpm", 1, lim.rpm and Bucket(f"rpm:{at}", lim.rpm, 60.0)),
                    ("tpm", cost, lim.tpm and Bucket(f"tpm:{at}", lim.tpm, 60.0)),
                    ("daily_tokens", cost, lim.daily_tokens and Counter(
                        f"qd:{at}:{day}", lim.daily_tokens, _to_next_day(now))),
                    ("monthly_tokens", cost, lim.monthly_tokens and Counter(
                        f"qm:{at}:{month}", lim.monthly_tokens, _to_next_month(now)))):
                if limit:
                    charges.append(Charge(limit, value))
                    what.append((scope, name))
        return charges, what


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


def _to_next_day(now: float) -> float:
    return 86400.0 - now % 86400.0


def _to_next_month(now: float) -> float:
    t = time.gmtime(now)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return max(calendar.timegm((year, month, 1, 0, 0, 0)) - now, 1.0)
