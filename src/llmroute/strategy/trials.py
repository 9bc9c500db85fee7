"""What split and shadow strategies measure, per arm: latency, errors and (where the arm's
answer says whether it was verified) quality; and the background sender of shadow copies.

Prometheus: ``llmroute_strategy_arm_seconds{strategy, arm}`` (histogram: a JSON answer's
time, a stream's time to its end), ``llmroute_strategy_arm_errors_total{strategy, arm}``,
``llmroute_strategy_shadow_dropped_total{strategy}`` (copies not sent: ``max_in_flight``
already running). In memory, for ``GET /debug/strategies`` and ``llmroute strategy
compare``: per arm the requests, errors, verified answers of those checked, and the last
``WINDOW`` latencies (P95 over them).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from llmroute.errors import LLMRouteError

WINDOW = 1000
"""How many recent latencies an arm's P95 is worked out over."""

_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


@dataclass
class ArmTally:
    """One arm's record: ``requests``, ``errors``, ``checked`` (answers that said whether
    they were verified), ``verified`` (of those, the ones that passed), the recent
    ``latencies`` (s) and, for a shadow's candidate, the copies ``dropped``."""

    requests: int = 0
    errors: int = 0
    checked: int = 0
    verified: int = 0
    dropped: int = 0
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def summary(self) -> dict[str, Any]:
        """``{requests, errors, error_rate, p95_ms, quality, dropped}`` (``p95_ms`` and
        ``quality`` — the verified share — None when nothing was measured)."""
        ordered = sorted(self.latencies)
        p95 = ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)] * 1000 if ordered else None
        return {"requests": self.requests, "errors": self.errors,
                "error_rate": self.errors / self.requests if self.requests else 0.0,
                "p95_ms": None if p95 is None else round(p95, 3),
                "quality": self.verified / self.checked if self.checked else None,
                "dropped": self.dropped}


class TrialStats:
    """Per-arm measurements of split and shadow strategies (module docstring), metrics in
    ``registry``; ``clock`` gives monotonic seconds."""

    def __init__(self, registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self._tallies: dict[str, dict[str, ArmTally]] = {}
        self._seconds = Histogram("llmroute_strategy_arm_seconds", "Time a split or shadow "
                                  "arm took to answer", ["strategy", "arm"], buckets=_BUCKETS,
                                  registry=registry)
        self._errors = Counter("llmroute_strategy_arm_errors", "Split or shadow arm answers "
                               "that failed", ["strategy", "arm"], registry=registry)
        self._dropped = Counter("llmroute_strategy_shadow_dropped", "Shadow copies not sent "
                                "(max_in_flight running)", ["strategy"], registry=registry)
        self._running: dict[str, set[asyncio.Task[Any]]] = {}

    def tally(self, strategy: str, arm: str) -> ArmTally:
        """The record of ``arm`` of ``strategy`` (created empty)."""
        return self._tallies.setdefault(strategy, {}).setdefault(arm, ArmTally())

    def record(self, strategy: str, arm: str, seconds: float, ok: bool,
               verified: bool | None = None) -> None:
        """One answer of ``arm``: its time (s), whether it succeeded, and whether it was
        verified (None: the answer does not say)."""
        t = self.tally(strategy, arm)
        t.requests += 1
        t.latencies.append(seconds)
        self._seconds.labels(strategy, arm).observe(seconds)
        if not ok:
            t.errors += 1
            self._errors.labels(strategy, arm).inc()
        if verified is not None:
            t.checked += 1
            t.verified += verified

    def summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        """strategy id → arm → ``ArmTally.summary()``, arms in first-seen order."""
        return {s: {a: t.summary() for a, t in arms.items()}
                for s, arms in self._tallies.items()}

    async def timed(self, strategy: str, arm: str, serving: Awaitable[Any],
                    verdict: Callable[[Any], bool | None] = lambda _: None) -> Any:
        """``serving``'s result (a finished answer: a stream is timed by ``watched``), its
        time and outcome recorded (``verdict`` reads whether the result was verified). A
        server error is recorded as the arm's error (``failed``); either way it is
        re-raised."""
        t0 = self.clock()
        try:
            result = await serving
        except BaseException as err:
            self.failed(strategy, arm, t0, err)
            raise
        self.record(strategy, arm, self.clock() - t0, True, verdict(result))
        return result

    def failed(self, strategy: str, arm: str, t0: float, err: BaseException) -> None:
        """``err`` ended ``arm``'s answer begun at ``t0`` (this clock, s): a server error
        (5xx, or an exception that is not an LLMRouteError) is recorded as the arm's error;
        a client's (4xx) and a cancellation (the client left) are not recorded at all."""
        if isinstance(err, LLMRouteError):
            if err.status >= 500:
                self.record(strategy, arm, self.clock() - t0, False)
        elif isinstance(err, Exception):
            self.record(strategy, arm, self.clock() - t0, False)

    async def watched(self, strategy: str, arm: str, t0: float, stream: AsyncIterator[bytes]
                      ) -> AsyncIterator[bytes]:
        """``stream`` passed through; its time from ``t0`` to its end is recorded, as an
        error when it raises (a client leaving early is not recorded)."""
        try:
            async for chunk in stream:
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception:
            self.record(strategy, arm, self.clock() - t0, False)
            raise
        self.record(strategy, arm, self.clock() - t0, True)

    def send(self, strategy: str, arm: str, limit: int, copy: Coroutine[Any, Any, Any],
             verdict: Callable[[Any], bool | None] = lambda _: None) -> bool:
        """Run ``copy`` in the background (its time and outcome recorded as ``timed``
        does, its result and error discarded) unless ``limit`` copies of ``strategy`` are running: then it is
        closed unrun, counted as dropped, and False is returned."""
        running = self._running.setdefault(strategy, set())
        if len(running) >= limit:
            copy.close()
            self.tally(strategy, arm).dropped += 1
            self._dropped.labels(strategy).inc()
            return False
        task = asyncio.get_running_loop().create_task(
            self._discard(strategy, arm, copy, verdict))
        running.add(task)
        task.add_done_callback(running.discard)
        return True

    async def _discard(self, strategy: str, arm: str, copy: Awaitable[Any],
                       verdict: Callable[[Any], bool | None]) -> None:
        try:
            await self.timed(strategy, arm, copy, verdict)
        except Exception:  # noqa: BLE001 - a shadow's error never reaches anyone
            return

    async def close(self) -> None:
        """Cancel every shadow copy still running and wait for them."""
        tasks = [t for running in self._running.values() for t in running]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def verified(answer: Any) -> bool | None:
    """Whether ``answer`` (anything with ``headers``) says it was verified
    (``x-llmroute-verified: true``), None when it does not say."""
    flag = answer.headers.get("x-llmroute-verified")
    return None if flag is None else flag == "true"
