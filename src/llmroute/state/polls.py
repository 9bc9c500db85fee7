"""One replica polls each engine's ``/metrics`` per interval; the fleet reads its result.

Before each poll of a backend the collector asks ``SharedPolls.lead``: one Lua script
takes (or, for its holder, renews) the per-engine lease ``<prefix>poll:{<backend>}``
(value: this replica's id, TTL ``2 × period_s``). The holder polls and ``publish``es the
outcome — the parsed ``EngineSignals`` or the error — as JSON in
``<prefix>signals:{<backend>}`` (TTL ``keep_s``); every other replica ``read``s it
instead of polling. The holder keeps the lease while it lives, so the fleet polls each
engine once per interval whatever its size; a holder that died lets its lease lapse and
another replica takes over within two intervals.

Ages cross machines without a shared clock: a snapshot's age is ``keep_s`` minus the key's
remaining ``PTTL``, and the reader dates it ``now - age`` on its own clock (its signals
turn stale on every replica at the same moment). Redis out of reach or slower than
``timeout_s``: ``lead`` says yes (every replica polls for itself, as without Redis) and
``publish`` drops the result; logged once per change of state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from llmroute.state.guard import stop_if_cancelled
from llmroute.types import EngineSignals

LEAD = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
"""KEYS[1] the lease, ARGV[1] the replica id, ARGV[2] its TTL in ms: 1 when this replica
holds the lease now."""

Outcome = tuple[EngineSignals | None, str | None]
"""A poll's outcome: the signals, or None and the error message."""


class SharedPolls:
    """The poll lease and published snapshots in ``redis`` under ``prefix`` (module
    docstring); ``period_s`` is the collector's interval."""

    def __init__(self, redis: aioredis.Redis, period_s: float, *, prefix: str = "llmroute:",
                 keep_s: float = 10.0, timeout_s: float = 0.25):
        self._redis, self._prefix, self._timeout = redis, prefix, timeout_s
        self._lease_ms = max(int(period_s * 2000), 1)
        self._keep_ms = max(int(keep_s * 1000), self._lease_ms)
        self._lead = redis.register_script(LEAD)
        self.replica = secrets.token_hex(6)
        self.up = True
        self.led = self.read_ok = 0
        self._log = structlog.get_logger("llmroute.fleet")

    async def lead(self, backend_id: str) -> bool:
        """True when this replica should poll ``backend_id`` now (it holds the lease, or
        Redis is out of reach)."""
        held = await self._bounded(self._lead(keys=[self._name("poll", backend_id)],
                                              args=[self.replica, self._lease_ms]))
        mine = held is None or bool(int(held))
        self.led += mine
        return mine

    async def publish(self, backend_id: str, outcome: Outcome) -> None:
        """Share this replica's poll ``outcome`` with the fleet (dropped when Redis is out
        of reach)."""
        signals, error = outcome
        body = {"error": error} if signals is None else {"signals": _encode(signals)}
        await self._bounded(self._redis.set(self._name("signals", backend_id),
                                            json.dumps(body), px=self._keep_ms))

    async def read(self, backend_id: str, now: float) -> Outcome | None:
        """The holder's last outcome, its signals dated on this replica's clock ``now``;
        None when none is published (or Redis is out of reach)."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.get(self._name("signals", backend_id))
        pipe.pttl(self._name("signals", backend_id))
        got = await self._bounded(pipe.execute())
        if got is None or got[0] is None:
            return None
        age_s = max(self._keep_ms - int(got[1]), 0) / 1000.0
        try:
            body = json.loads(got[0])
            if "signals" not in body:
                return None, str(body.get("error") or "poll failed")
            outcome: Outcome = _decode(body["signals"], now - age_s), None
        except (ValueError, TypeError, AttributeError):
            return None
        self.read_ok += 1
        return outcome

    def _name(self, kind: str, backend_id: str) -> str:
        return f"{self._prefix}{kind}:{{{backend_id}}}"

    async def _bounded(self, call: Any) -> Any:
        """``call``'s result, or None when Redis does not answer within the bound."""
        try:
            async with asyncio.timeout(self._timeout):
                result = await call
        except (RedisError, OSError, TimeoutError) as exc:
            stop_if_cancelled(exc)
            if self.up:
                self.up = False
                self._log.warning("shared_polls_unavailable", error=type(exc).__name__,
                                  polling="every replica polls for itself")
            return None
        if not self.up:
            self.up = True
            self._log.info("shared_polls_available")
        return result


def _encode(signals: EngineSignals) -> dict[str, Any]:
    """``signals`` as JSON-ready fields, without ``taken_at`` (the reader dates it)."""
    out = {f.name: getattr(signals, f.name) for f in dataclasses.fields(signals)}
    del out["taken_at"]
    return out


def _decode(fields: dict[str, Any], taken_at: float) -> EngineSignals:
    """The ``EngineSignals`` of ``_encode``'s ``fields`` taken at ``taken_at``; raises
    TypeError or ValueError for fields it does not have."""
    known = {f.name for f in dataclasses.fields(EngineSignals)} - {"taken_at"}
    kept = {k: v for k, v in fields.items() if k in known}
    if kept.get("loaded_models") is not None:
        kept["loaded_models"] = tuple((str(n), int(s)) for n, s in kept["loaded_models"])
    kept["missing"] = tuple(kept.get("missing") or ())
    kept["rejected"] = tuple(kept.get("rejected") or ())
    return EngineSignals(taken_at=taken_at, **kept)
