"""fusion: the request fanned out to K pools in parallel, their answers combined.

``voters: [{pool, weight}, …]`` (each pool once, at least two; ``weight`` > 0 is the pool's
accuracy weight, default 1) are asked at once, each leg through the anchor, failover and
breakers of its pool as usual. ``combine`` says how the answers become one:

* ``vote`` (default, short or classification-style answers) — a majority vote over the
  normalised texts (stripped, casefolded, trailing punctuation removed), each answer
  weighing its pool's ``weight`` × its confidence (exp of its mean token logprob; 1 when
  the engine gives none). Voters are asked for ``logprobs``; the answer carries them only
  when the client asked. The answer is the heaviest answer of the winning text.
* ``json`` — every answer must be JSON satisfying ``json_schema`` (a JSON Schema, or
  ``request`` for the request's ``response_format`` schema; unset: any JSON); invalid
  answers are dropped. The valid ones are voted field by field (``strategy/vote.py``,
  weights as above); the answer's text is the fused JSON.
* ``judge`` — the ``judge.pool`` is shown the numbered candidates (``judge.prompt``, a Jinja
  template over ``request.last_user`` and ``candidates``) and answers the number of the
  best; an answer naming no candidate ends the request with a 502.

A voter still unanswered ``deadline_s`` (s, default 30) after the fan-out is cut. With fewer
than ``quorum`` (default: a majority of the voters) usable answers the request fails with a
503 (``fusion_quorum``), which the strategy's ``fallback_strategy`` serves instead when set.

The answer says how it went: ``x-llmroute-fusion`` (the pools that voted) and ``"llmroute":
{"fusion": {"combine", "quorum", "pools", "winner", "voters": [{"pool", "weight",
"confidence", "vote_weight", "status", "backend"}], "judge"}}``; usage is the sum over every
leg. A streamed request is held until the vote and gets the finished answer replayed as SSE
(the ``llmroute`` extension in its final chunk). Budget: each voter (and the judge) gets its
first attempt; the request's retries are shared out among the voters up front.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from llmroute.errors import LLMRouteError, NoBackendAvailable, UpstreamProtocolError
from llmroute.strategy.answers import (
    JUDGE_TOKENS,
    answer_text,
    last_user,
    leg_request,
    non_streamed,
    with_text,
    without_logprobs,
)
from llmroute.strategy.ballots import Answered, ask_voters
from llmroute.strategy.checks import (
    SchemaRef,
    compile_schema,
    compile_template,
    json_of,
    request_validator,
    schema_problem,
)
from llmroute.strategy.protocol import KindContext, Run, Runner, Scorer, Served
from llmroute.strategy.spec import StrategySpec, Strict
from llmroute.strategy.steps import add_usage
from llmroute.strategy.vote import Ballot, json_vote, text_vote
from llmroute.types import ChatRequest, Intent, RoutePlan

DEFAULT_PICK = ("Question:\n{{ request.last_user }}\n\nCandidate answers:\n"
                "{% for c in candidates %}[{{ loop.index }}] {{ c }}\n{% endfor %}\n"
                "Which candidate answers the question best? Reply with its number only.")
PICK_NAMES = frozenset({"request", "candidates"})
_NUMBER = re.compile(r"\d+")


class VoterSpec(Strict):
    """One voter: its ``pool`` and the pool's accuracy ``weight`` (> 0)."""

    pool: str
    weight: float = Field(1.0, gt=0)


class PickSpec(Strict):
    """``judge``: the ``pool`` that picks the best candidate and its ``prompt``."""

    pool: str
    prompt: str = DEFAULT_PICK

    @field_validator("prompt")
    @classmethod
    def _compiles(cls, prompt: str) -> str:
        compile_template(prompt, PICK_NAMES)
        return prompt


class FusionSpec(StrategySpec):
    """``kind: fusion``: ``voters``, ``combine`` (``vote``, ``json``, ``judge``),
    ``json_schema`` (``json`` only), ``judge`` (``judge`` only), ``quorum`` (answers
    needed, ≤ the voters) and ``deadline_s`` (s)."""

    kind: Literal["fusion"]
    voters: tuple[VoterSpec, ...] = Field(min_length=2)
    combine: Literal["vote", "json", "judge"] = "vote"
    json_schema: SchemaRef = None
    judge: PickSpec | None = None
    quorum: int | None = Field(None, ge=1)
    deadline_s: float = Field(30.0, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> FusionSpec:
        pools = [v.pool for v in self.voters]
        twice = sorted({p for p in pools if pools.count(p) > 1})
        problems = [f"a pool votes twice: {', '.join(twice)}"] if twice else []
        if (self.judge is None) == (self.combine == "judge"):
            problems.append("combine: judge needs a judge, and a judge needs combine: judge")
        if self.json_schema is not None and self.combine != "json":
            problems.append("json_schema is read only with combine: json")
        if self.quorum is not None and self.quorum > len(self.voters):
            problems.append(f"quorum {self.quorum} is above the {len(self.voters)} voters")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def pool_refs(self) -> list[tuple[tuple[Any, ...], str]]:
        """Every voter's pool and the judge's."""
        refs: list[tuple[tuple[Any, ...], str]] = [
            (("voters", i, "pool"), v.pool) for i, v in enumerate(self.voters)]
        if self.judge is not None:
            refs.append((("judge", "pool"), self.judge.pool))
        return refs


def build_fusion(spec: FusionSpec, ctx: KindContext) -> FusionStrategy:
    """The FusionStrategy a ``fusion`` file describes, planned over ``ctx.backends``."""
    pools = [v.pool for v in spec.voters]
    first = tuple(b.id for b in ctx.backends.values() if b.pool == pools[0])
    rest = tuple(b.id for p in pools[1:] for b in ctx.backends.values() if b.pool == p)
    extra = len(pools) - 1 + (spec.judge is not None)
    plan = RoutePlan(pools[0], f"fusion of {', '.join(pools)} by {spec.combine}", first, rest,
                     ctx.max_attempts + extra)
    schema = spec.json_schema
    template = None if spec.judge is None else compile_template(spec.judge.prompt, PICK_NAMES)
    return FusionStrategy(spec, plan, compile_schema(schema) if isinstance(schema, dict)
                          else None, template)


class FusionStrategy(Runner):
    """Serves a request by the vote of ``spec.voters`` as the module docstring says."""

    def __init__(self, spec: FusionSpec, plan: RoutePlan, validator: Any, template: Any):
        self._spec = spec
        self._plan = plan
        self._validator = validator
        self._template = template
        self.quorum = spec.quorum or len(spec.voters) // 2 + 1

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan:
        """The fusion's plan (what ``/debug/route`` shows): every voter's pool."""
        return self._plan

    def describe(self, request: ChatRequest, intent: Intent, score: Scorer
                 ) -> dict[str, Any]:
        """``{"voters": [{pool, weight}], "combine", "quorum", "deadline_s", "judge"
        (its pool or None), "schema"}`` (``schema``: a configured one, the request's
        ``response_format`` or None)."""
        spec = self._spec
        schema = None if spec.json_schema is None else \
            "request" if spec.json_schema == "request" else "configured"
        return {"voters": [{"pool": v.pool, "weight": v.weight} for v in spec.voters],
                "combine": spec.combine, "quorum": self.quorum, "deadline_s": spec.deadline_s,
                "judge": None if spec.judge is None else spec.judge.pool, "schema": schema}

    async def serve(self, run: Run) -> Served:
        """Fan out, combine. Raises NoBackendAvailable (``fusion_quorum``) below quorum,
        or the judge's error."""
        spec = self._spec
        request = non_streamed(run.request, logprobs=spec.combine != "judge")
        votes = await ask_voters(run, request, spec.voters, spec.deadline_s,
                                 keep=int(spec.judge is not None))
        usage: dict[str, int] = {}
        for vote in votes:
            if vote.answer is not None:
                add_usage(usage, vote.answer)
        parsed = self._screen(run, votes)
        usable = [v for v in votes if v.status == "voted"]
        run.trace.step("fusion", combine=spec.combine, voters=[v.note() for v in votes])
        if len(usable) < self.quorum:
            raise NoBackendAvailable(
                f"fusion got {len(usable)} usable answer(s) of {len(votes)} voters, below "
                f"its quorum of {self.quorum}: " + "; ".join(
                    f"{v.voter.pool}: {v.status}" for v in votes), code="fusion_quorum")
        winner, body, judged = await self._combine(run, usable, parsed, usage)
        return self._served(run, votes, winner, body, usage, judged)

    def _screen(self, run: Run, votes: list[Answered]) -> dict[int, Any]:
        """``json``: each answer's JSON value by vote index; an invalid one is marked."""
        if self._spec.combine != "json":
            return {}
        validator = self._validator or request_validator(run.request)
        out: dict[int, Any] = {}
        for i, vote in enumerate(votes):
            if vote.status != "voted" or vote.answer is None:
                continue
            problem = schema_problem(validator, answer_text(vote.answer))
            if problem is not None:
                vote.status = f"invalid: {problem}"
            else:
                out[i] = json_of(answer_text(vote.answer))
        return out

    async def _combine(self, run: Run, usable: list[Answered], parsed: dict[int, Any],
                       usage: dict[str, int]) -> tuple[Answered, dict[str, Any], Any]:
        """The winning vote, the answer body and the judge's note (None without one)."""
        ballots = [Ballot(answer_text(v.answer or {}), v.vote_weight) for v in usable]
        if self._spec.combine == "judge":
            pick, note = await self._pick(run, [b.answer for b in ballots], usage)
            return usable[pick], dict(usable[pick].answer or {}), note
        best = usable[text_vote(ballots)]
        if self._spec.combine == "vote":
            return best, dict(best.answer or {}), None
        validator = self._validator or request_validator(run.request)
        values = [Ballot(parsed[v.index], v.vote_weight) for v in usable]
        fused = json_vote(values, lambda value: not list(validator.iter_errors(value)))
        heaviest = max(usable, key=lambda v: (v.vote_weight, -v.index))
        text = json.dumps(fused, ensure_ascii=False)
        return heaviest, with_text(heaviest.answer or {}, text), None

    async def _pick(self, run: Run, candidates: list[str], usage: dict[str, int]
                    ) -> tuple[int, dict[str, Any]]:
        """Ask the judge which candidate is best: its index and the judge's note. Raises
        the judge's error, or UpstreamProtocolError when it names no candidate."""
        judge = self._spec.judge
        assert judge is not None and self._template is not None
        prompt = self._template.render(request={"last_user": last_user(run.request)},
                                       candidates=candidates)
        try:
            backend, answer = await run.legs.complete(
                leg_request(run.request, prompt, "fusion-judge", JUDGE_TOKENS), judge.pool)
        except LLMRouteError as err:
            err.message = f"the fusion judge (pool {judge.pool}) failed: {err.message}"
            err.args = (err.message,)
            raise
        add_usage(usage, answer)
        text = answer_text(answer)
        found = _NUMBER.search(text)
        pick = int(found.group()) if found else 0
        if not 1 <= pick <= len(candidates):
            raise UpstreamProtocolError(
                f"the fusion judge (pool {judge.pool}) named no candidate of 1–"
                f"{len(candidates)}: {text[:200]!r}", backend_id=backend.id,
                code="fusion_judge_nonsense")
        run.trace.step("fusion_judge", pool=judge.pool, backend=backend.id, pick=pick)
        return pick - 1, {"pool": judge.pool, "backend": backend.id, "pick": pick}

    def _served(self, run: Run, votes: list[Answered], winner: Answered,
                body: dict[str, Any], usage: dict[str, int], judged: Any) -> Served:
        if not run.request.body.get("logprobs"):
            body = without_logprobs(body)
        voted = [v.voter.pool for v in votes if v.status == "voted"]
        assert winner.backend is not None
        note = {"combine": self._spec.combine, "quorum": self.quorum, "pools": voted,
                "winner": {"pool": winner.voter.pool, "backend": winner.backend.id},
                "voters": [v.note() for v in votes]}
        if judged is not None:
            note["judge"] = judged
        extension = body.get("llmroute")
        body = {**body, "llmroute": {**(extension if isinstance(extension, dict) else {}),
                                     "fusion": note}}
        if usage:
            body["usage"] = usage
        return Served(body, {"x-llmroute-backend": winner.backend.id,
                             "x-llmroute-pool": winner.backend.pool,
                             "x-llmroute-fusion": ",".join(voted)})

