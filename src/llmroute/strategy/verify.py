"""verify: the primary ``pool`` drafts; a verifier checks the draft (``strategy/checks.py``).

On a failed check, ``on_failure: regenerate`` asks ``regenerate_pool`` once more (that
answer is checked too) and ``return_draft`` (the default) returns the draft; either way
the answer says how it went: ``x-llmroute-verified: true|false`` and ``"llmroute":
{"verify": {"verified", "check", "reason", "pools"}}`` in the body. A verifier that cannot
reach a verdict (the judge errs or answers nonsense) ends the request with its OpenAI-shaped
error (``on_verifier_error: fail``, the default) or returns the draft with
``x-llmroute-verified: error`` (``return_draft``). Every leg — draft, judge, regeneration —
spends from the request's one attempt budget; with none left for a regeneration the draft
is returned unverified.

A streamed request is held until verified (``stream: hold``, the only mode so far): it
gets the checked answer as SSE chunks, the verdict in the final chunk's ``llmroute``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from llmroute.errors import LLMRouteError
from llmroute.strategy.answers import non_streamed, without_logprobs
from llmroute.strategy.checks import (
    JudgeCheck,
    LogprobCheck,
    SchemaCheck,
    Verdict,
    VerifierFault,
    SchemaRef,
    compile_schema,
    compile_template,
)
from llmroute.strategy.protocol import KindContext, Run, Runner, Scorer, Served
from llmroute.strategy.single import SingleStrategy
from llmroute.strategy.spec import StrategySpec, Strict
from llmroute.types import Backend, ChatRequest, Intent, RoutePlan

DEFAULT_JUDGE = ("You check answers.\n\nQuestion:\n{{ request.last_user }}\n\nAnswer:\n"
                 "{{ draft }}\n\nDoes the answer correctly answer the question? Reply with "
                 "one word: PASS or FAIL.")

Check = SchemaCheck | JudgeCheck | LogprobCheck


class JudgeSpec(Strict):
    """``judge``: the verifier ``pool``, its ``prompt`` (Jinja over ``request.last_user``
    and ``draft``) and an optional ``min_score`` a PASS must reach when a score is given."""

    pool: str
    prompt: str = DEFAULT_JUDGE
    min_score: float | None = None

    @field_validator("prompt")
    @classmethod
    def _compiles(cls, prompt: str) -> str:
        compile_template(prompt)
        return prompt


class LogprobSpec(Strict):
    """``logprob``: the mean token log-probability (≤ 0) a draft must reach."""

    min_mean: float = Field(le=0)


class CheckSpec(Strict):
    """Exactly one of ``json_schema`` (a JSON Schema, or ``request`` for the request's
    ``response_format`` schema), ``judge`` or ``logprob``."""

    json_schema: SchemaRef = None
    judge: JudgeSpec | None = None
    logprob: LogprobSpec | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> CheckSpec:
        given = [n for n in ("json_schema", "judge", "logprob") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of json_schema, judge, logprob (got "
                             f"{', '.join(given) or 'none'})")
        return self


class VerifySpec(StrategySpec):
    """``kind: verify``: the drafting ``pool``, the ``check``, what to do ``on_failure``
    (``regenerate`` on ``regenerate_pool``, or ``return_draft``) and
    ``on_verifier_error`` (``fail`` or ``return_draft``); ``stream: hold``."""

    kind: Literal["verify"]
    pool: str
    check: CheckSpec
    on_failure: Literal["regenerate", "return_draft"] = "return_draft"
    regenerate_pool: str | None = None
    on_verifier_error: Literal["fail", "return_draft"] = "fail"
    stream: Literal["hold"] = "hold"

    @model_validator(mode="after")
    def _regenerates_somewhere(self) -> VerifySpec:
        if self.on_failure == "regenerate" and self.regenerate_pool is None:
            raise ValueError("on_failure: regenerate needs a regenerate_pool")
        return self

    def pool_refs(self) -> list[tuple[tuple[Any, ...], str]]:
        """The drafting pool, the regeneration pool and the judge's pool."""
        refs: list[tuple[tuple[Any, ...], str]] = [(("pool",), self.pool)]
        if self.regenerate_pool is not None:
            refs.append((("regenerate_pool",), self.regenerate_pool))
        if self.check.judge is not None:
            refs.append((("check", "judge", "pool"), self.check.judge.pool))
        return refs


def build_verify(spec: VerifySpec, ctx: KindContext) -> VerifyStrategy:
    """The VerifyStrategy a ``verify`` file describes (its schema and template compiled)."""
    return VerifyStrategy(spec, _check(spec.check),
                          SingleStrategy(ctx.backends, ctx.intents, ctx.default_pool,
                                         ctx.max_attempts, pool=spec.pool))


def _check(spec: CheckSpec) -> Check:
    if spec.judge is not None:
        return JudgeCheck(spec.judge.pool, compile_template(spec.judge.prompt),
                          spec.judge.min_score)
    if spec.logprob is not None:
        return LogprobCheck(spec.logprob.min_mean)
    schema = spec.json_schema
    return SchemaCheck(compile_schema(schema) if isinstance(schema, dict) else None)


def _check_view(spec: CheckSpec) -> dict[str, Any]:
    """The check as ``/debug/route`` shows it (no schema or prompt text)."""
    if spec.judge is not None:
        return {"by": "judge", "pool": spec.judge.pool, "min_score": spec.judge.min_score}
    if spec.logprob is not None:
        return {"by": "logprob", "min_mean": spec.logprob.min_mean}
    return {"by": "json_schema",
            "schema": "request" if spec.json_schema == "request" else "configured"}


class VerifyStrategy(Runner):
    """Drafts on ``spec.pool`` (planned by ``single``), checks with ``check``."""

    def __init__(self, spec: VerifySpec, check: Check, single: SingleStrategy):
        self._spec = spec
        self._check = check
        self._single = single

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan:
        """The draft's plan: every backend of the drafting pool."""
        return self._single.plan(request, intent)

    def describe(self, request: ChatRequest, intent: Intent, score: Scorer
                 ) -> dict[str, Any]:
        """``{"pool", "check": {"by": json_schema|judge|logprob, …}, "on_failure",
        "regenerate_pool", "on_verifier_error", "stream"}``."""
        spec = self._spec
        return {"pool": spec.pool, "check": _check_view(spec.check),
                "on_failure": spec.on_failure, "regenerate_pool": spec.regenerate_pool,
                "on_verifier_error": spec.on_verifier_error, "stream": spec.stream}

    async def serve(self, run: Run) -> Served:
        """Draft, check, and regenerate or flag as configured. Raises the draft leg's
        error, or the verifier's (``on_verifier_error: fail``)."""
        spec, request = self._spec, non_streamed(run.request, self._check.wants_logprobs)
        backend, draft = await run.legs.complete(request, spec.pool)
        try:
            verdict = await self._verdict(run, draft, spec.pool)
        except VerifierFault as fault:
            if spec.on_verifier_error == "fail":
                raise fault.error from fault
            return self._served(run, backend, draft, "error", Verdict(False, str(fault)),
                                [spec.pool])
        if verdict.passed or spec.regenerate_pool is None or spec.on_failure != "regenerate":
            return self._served(run, backend, draft, _flag(verdict), verdict, [spec.pool])
        return await self._regenerate(run, request, (backend, draft, verdict))

    async def _regenerate(self, run: Run, request: ChatRequest,
                          first: tuple[Backend, dict[str, Any], Verdict]) -> Served:
        """Ask ``regenerate_pool`` once; the draft stands when it cannot answer."""
        pool = self._spec.regenerate_pool
        assert pool is not None
        pools = [self._spec.pool, pool]
        try:
            backend, again = await run.legs.complete(request, pool)
            verdict = await self._verdict(run, again, pool)
        except (LLMRouteError, VerifierFault) as err:
            backend, draft, verdict = first
            reason = f"{verdict.reason}; regeneration on {pool} failed: {err}"
            return self._served(run, backend, draft, "false", Verdict(False, reason), pools)
        return self._served(run, backend, again, _flag(verdict), verdict, pools)

    async def _verdict(self, run: Run, answer: dict[str, Any], pool: str) -> Verdict:
        verdict = await self._check.verdict(run, answer)
        run.trace.step("verify", check=self._check.name, pool=pool, passed=verdict.passed,
                       reason=verdict.reason)
        return verdict

    def _served(self, run: Run, backend: Backend, answer: dict[str, Any], flag: str,
                verdict: Verdict, pools: list[str]) -> Served:
        body = dict(answer)
        if self._check.wants_logprobs and not run.request.body.get("logprobs"):
            body = without_logprobs(body)
        note = {"verified": {"true": True, "false": False}.get(flag), "check":
                self._check.name, "reason": verdict.reason, "pools": pools}
        extension = body.get("llmroute")
        body["llmroute"] = {**(extension if isinstance(extension, dict) else {}),
                            "verify": note}
        return Served(body, {"x-llmroute-backend": backend.id, "x-llmroute-pool": backend.pool,
                             "x-llmroute-verified": flag})


def _flag(verdict: Verdict) -> str:
    return "true" if verdict.passed else "false"
