"""cascade: try the cheaper pool first, escalate to the stronger one when needed.

``pools`` lists the pools cheapest first. Before anything is sent, the cascade picks the
pool to start on: the first; with the gate's win head (``Intent.wins``: per cheaper pool the
probability that it answers as well as the ladder's reference), the cheapest pool whose
probability is at least ``escalate.win_probability_at_least``, or whose rank (the share of
the head's fit prompts given a lower probability) is at least ``escalate.win_rank_at_least``
— a target share of calls kept off the pools above it (a pool the head does not judge
ends the climb); at least the next one when the gate's complexity is above
``escalate.complexity_above``; then, while the chosen pool's best anchor score is under
``downgrade_below`` (seed 001: 0.3; no backend surviving the anchor's filters counts as
under), it moves on to the next pool. Each reason is listed in the answer.

A non-streamed request drafts on the chosen pool (asking for ``logprobs`` when
``escalate.mean_logprob_below`` is set; they are left out of the answer unless the client
asked). The draft is escalated — the same request asked of the next pool, whose answer is
final — when its mean token logprob is below ``mean_logprob_below``, or when the draft
pool fails with a server error (``escalate.on_error``, default true). The answer's usage
is the sum of both legs.

A streamed request is truly streamed: it opens on the chosen pool's best backend, and the
fuse (``fuse``'s entropy trigger for that pool, and its failure handoffs) hands the stream
off mid-answer to the next pool's backends, which continue the text already sent — so the
stronger model takes over without a restart. ``mean_logprob_below`` (a whole-answer
measure) does not apply to streams; the fuse's entropy run is their confidence signal.

The answer says how it went: ``x-llmroute-cascade`` (the pools asked, ``cheap>strong``)
and, non-streamed, ``"llmroute": {"cascade": {"pools", "escalated", "reasons"}}``; a
stream's handoffs are in its final chunk (``llmroute.handoffs``). Budget: the escalation
is a leg of its own (one attempt beyond ``retry.max_attempts``, kept back from the draft's
failover); failovers inside a pool spend the request's shared retries.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from llmroute.errors import LLMRouteError
from llmroute.strategy.answers import non_streamed, without_logprobs
from llmroute.strategy.checks import mean_logprob
from llmroute.strategy.protocol import KindContext, Run, Runner, Scorer, Served
from llmroute.strategy.spec import StrategySpec, Strict
from llmroute.strategy.steps import add_usage
from llmroute.types import Backend, ChatRequest, Intent, RoutePlan


class EscalateSpec(Strict):
    """When to move to the next pool: ``complexity_above`` (0.1–5.0, decided up front),
    ``mean_logprob_below`` (≤ 0, the non-streamed draft's mean token logprob) and
    ``on_error`` (the draft pool failed with a server error), ``win_probability_at_least``
    and ``win_rank_at_least`` (0–1, the win head's probability or rank a pool needs to be
    started on; module docstring)."""

    complexity_above: float | None = Field(None, ge=0.1, le=5.0)
    win_probability_at_least: float | None = Field(None, ge=0, le=1)
    win_rank_at_least: float | None = Field(None, ge=0, le=1)
    mean_logprob_below: float | None = Field(None, le=0)
    on_error: bool = True


class CascadeSpec(StrategySpec):
    """``kind: cascade``: ``pools`` cheapest first (at least two, each once), ``escalate``
    and ``downgrade_below`` (0–1, the best anchor score a pool needs to be used)."""

    kind: Literal["cascade"]
    pools: tuple[str, ...] = Field(min_length=2)
    escalate: EscalateSpec = EscalateSpec()
    downgrade_below: float | None = Field(None, ge=0, le=1)

    @field_validator("pools")
    @classmethod
    def _each_once(cls, pools: tuple[str, ...]) -> tuple[str, ...]:
        twice = sorted({p for p in pools if pools.count(p) > 1})
        if twice:
            raise ValueError(f"a pool is listed twice: {', '.join(twice)}")
        return pools

    def pool_refs(self) -> list[tuple[tuple[Any, ...], str]]:
        """Every pool of the cascade."""
        return [(("pools", i), p) for i, p in enumerate(self.pools)]


def build_cascade(spec: CascadeSpec, ctx: KindContext) -> CascadeStrategy:
    """The CascadeStrategy a ``cascade`` file describes, planned over ``ctx.backends``."""
    first = tuple(b.id for b in ctx.backends.values() if b.pool == spec.pools[0])
    rest = tuple(b.id for p in spec.pools[1:] for b in ctx.backends.values() if b.pool == p)
    plan = RoutePlan(spec.pools[0], f"cascade {' → '.join(spec.pools)}", first, rest,
                     ctx.max_attempts + 1)
    return CascadeStrategy(spec, plan)


class CascadeStrategy(Runner):
    """Serves a request on ``spec.pools`` as the module docstring says; ``plan`` is the
    cheapest pool first, the others as its fallbacks."""

    def __init__(self, spec: CascadeSpec, plan: RoutePlan):
        self._spec = spec
        self._plan = plan

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan:
        """The cascade's plan (what ``/debug/route`` shows)."""
        return self._plan

    async def serve(self, run: Run) -> Served:
        """Pick the pool, then draft and maybe escalate (JSON) or stream. Raises the last
        leg's error."""
        start, reasons = self.start(run)
        run.trace.step("cascade", pool=self._spec.pools[start], reasons=list(reasons))
        if run.request.stream:
            backend, stream = await run.legs.stream(run.request, self._spec.pools[start:])
            return Served({}, _headers(backend, [backend.pool]), stream=stream)
        return await self._complete(run, start, reasons)

    def describe(self, request: ChatRequest, intent: Intent, score: Scorer
                 ) -> dict[str, Any]:
        """``{"pools", "escalate": {complexity_above, mean_logprob_below, on_error,
        win_probability_at_least, win_rank_at_least}, "downgrade_below", "start", "reasons",
        "wins"}``: ``start`` is the pool this request would start on, ``reasons`` why it is
        not the first (as ``serve`` decides) and ``wins`` the win head's answer."""
        spec = self._spec
        i, reasons = self.start_on(request, intent, score)
        return {"pools": list(spec.pools), "escalate": spec.escalate.model_dump(),
                "downgrade_below": spec.downgrade_below, "start": spec.pools[i],
                "reasons": reasons, "wins": [w._asdict() for w in intent.wins]}

    def start(self, run: Run) -> tuple[int, list[str]]:
        """The index of the pool to start on and why it is not the first."""
        return self.start_on(run.request, run.intent, run.legs.best_score)

    def start_on(self, request: ChatRequest, intent: Intent, score: Scorer
                 ) -> tuple[int, list[str]]:
        """``start`` from the gate's ``intent`` and the anchor's best ``score`` per pool."""
        spec = self._spec
        i, reasons = self._win_start(intent)
        limit = spec.escalate.complexity_above
        if limit is not None and intent.complexity > limit and i == 0:
            i = 1
            reasons.append(f"complexity {intent.complexity:g} > {limit:g}")
        while spec.downgrade_below is not None and i < len(spec.pools) - 1:
            best = score(request, spec.pools[i])
            if best is not None and best >= spec.downgrade_below:
                break
            shown = "no backend passes the anchor's filters" if best is None \
                else f"best anchor score {best:.3f} < {spec.downgrade_below:g}"
            reasons.append(f"pool {spec.pools[i]}: {shown}")
            i += 1
        return i, reasons

    def _win_start(self, intent: Intent) -> tuple[int, list[str]]:
        """The cheapest pool the win head clears (module docstring) and why the ones below
        it were passed over; 0 and none without a threshold or the head's answer."""
        esc, pools = self._spec.escalate, self._spec.pools
        if esc.win_probability_at_least is None and esc.win_rank_at_least is None:
            return 0, []
        wins, reasons = {w.pool: w for w in intent.wins}, []
        for i, pool in enumerate(pools[:-1]):
            win = wins.get(pool)
            if win is None:
                return i, reasons
            low = _below(win.probability, esc.win_probability_at_least, "probability") \
                or _below(win.rank, esc.win_rank_at_least, "rank")
            if low is None:
                return i, reasons
            reasons.append(f"pool {pool}: win {low}")
        return len(pools) - 1, reasons

    async def _complete(self, run: Run, start: int, reasons: list[str]) -> Served:
        """Draft on ``pools[start]``; escalate once to the next pool when it says so."""
        pools, escalate = self._spec.pools, self._spec.escalate
        can_escalate = start < len(pools) - 1
        wants = escalate.mean_logprob_below is not None and can_escalate
        draft = non_streamed(run.request, logprobs=wants)
        try:
            backend, answer = await run.legs.complete(draft, pools[start], int(can_escalate))
        except LLMRouteError as err:
            if not (can_escalate and escalate.on_error and err.status >= 500):
                raise
            return await self._escalate(run, start, reasons + [f"draft failed: {err.message}"],
                                        {})
        why = self._unsure(answer) if wants else None
        if why is None:
            return self._served(run, backend, answer, [pools[start]], reasons, answer)
        return await self._escalate(run, start, reasons + [why], answer)

    async def _escalate(self, run: Run, start: int, reasons: list[str],
                        draft: dict[str, Any]) -> Served:
        pools = self._spec.pools
        backend, answer = await run.legs.complete(non_streamed(run.request),
                                                  pools[start + 1])
        run.trace.step("cascade", escalated_to=pools[start + 1], reason=reasons[-1])
        return self._served(run, backend, answer, [pools[start], pools[start + 1]], reasons,
                            draft)

    def _unsure(self, answer: dict[str, Any]) -> str | None:
        """Why the draft is escalated on its confidence, None when it is confident."""
        limit = self._spec.escalate.mean_logprob_below
        mean = mean_logprob(answer)
        if limit is None or (mean is not None and mean >= limit):
            return None
        return "the draft carries no logprobs" if mean is None \
            else f"draft mean logprob {mean:.3f} < {limit:g}"

    def _served(self, run: Run, backend: Backend, answer: dict[str, Any], pools: list[str],
                reasons: list[str], draft: dict[str, Any]) -> Served:
        body = answer if run.request.body.get("logprobs") else without_logprobs(answer)
        usage: dict[str, int] = {}
        add_usage(usage, answer)
        if draft is not answer:
            add_usage(usage, draft)
        extension = body.get("llmroute")
        body = {**body, "llmroute": {
            **(extension if isinstance(extension, dict) else {}),
            "cascade": {"pools": pools, "escalated": len(pools) > 1, "reasons": reasons}}}
        if usage:
            body["usage"] = usage
        return Served(body, _headers(backend, pools))


def _below(value: float, limit: float | None, what: str) -> str | None:
    """``"<what> v < limit"`` when ``value`` is under a set ``limit``, else None."""
    return None if limit is None or value >= limit else f"{what} {value:g} < {limit:g}"


def _headers(backend: Backend, pools: list[str]) -> dict[str, str]:
    return {"x-llmroute-backend": backend.id, "x-llmroute-pool": backend.pool,
            "x-llmroute-cascade": ">".join(pools)}
