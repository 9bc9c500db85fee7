"""pipeline: ordered steps, each a model call on its own pool with its own prompt.

Each step (``steps: [{name, pool, prompt, json_schema, timeout_s, max_tokens}, …]``)
renders its ``prompt`` (``strategy/steps.py``: ``{{ request.last_user }}``,
``{{ steps.<earlier>.output }}``, ``.json``) and asks its pool. A step with a
``json_schema`` must answer JSON satisfying it: an invalid answer is asked again once with
the validation error appended, then the step fails. A step taking longer than its
``timeout_s`` fails with a 504. Earlier steps are one-turn chat requests at temperature 0
(``max_tokens``: 512 unless given); the last step is the client's own request (endpoint,
sampling fields, ``stream``) with the rendered prompt as its conversation.

Only the last step reaches the client: a streamed request gets the last step truly
streamed through dispatch's relay (failover and the fuse's handoffs as usual; its
``timeout_s`` then bounds the wait for the first chunk, the engine timeouts the rest), or,
when the last step has a ``json_schema``, held until it is validated and replayed as SSE.
The answer's ``usage`` is the sum over every step (in the usage chunk for a stream); a
non-streamed answer's ``llmroute.pipeline`` lists the steps (name, pool, backend, hop id).
Earlier steps' outputs are in the trace — one ``pipeline_step`` step each, with
``hop_id`` (``<request id>/<step>``), ``input_ref`` (``request`` and the hop ids of the
steps it reads), the request's ``trace_id``, pool, backend and output — never in the answer.

A failed step ends the request with an OpenAI-shaped error naming the step (its cause's
status: 502/503/504), which the strategy's ``fallback_strategy`` serves instead when set
(``pipeline.run_strategy``). Budget: each step's first attempt is its own; the request's
retries (``retry.max_attempts`` − 1: failovers and schema re-asks) are shared by every
step, so retries never multiply across steps.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Literal

import jsonschema
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from llmroute.errors import LLMRouteError, UpstreamProtocolError, UpstreamTimeout
from llmroute.strategy.answers import answer_text, last_user, leg_request, non_streamed
from llmroute.strategy.checks import compile_schema, compile_template, json_of, schema_problem
from llmroute.strategy.protocol import KindContext, Run, Runner, Scorer, Served
from llmroute.strategy.spec import StrategySpec, Strict
from llmroute.strategy.steps import (
    STEP_NAMES,
    add_usage,
    last_step_request,
    render,
    retry_request,
    step_refs,
    with_usage,
)
from llmroute.types import Backend, ChatRequest, Intent, RoutePlan

STEP_TOKENS = 512
"""Output tokens an earlier step may use unless its ``max_tokens`` says otherwise."""
OUTPUT_IN_TRACE = 2000
"""Characters of a step's output kept in the trace."""


class StepSpec(Strict):
    """One step: ``name`` (an identifier, unique), ``pool``, ``prompt`` (a template),
    optional ``json_schema``, ``timeout_s`` (s, default 60) and ``max_tokens``."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    pool: str
    prompt: str = Field(min_length=1)
    json_schema: dict[str, Any] | None = None
    timeout_s: float = Field(60.0, gt=0)
    max_tokens: int | None = Field(None, ge=1)

    @field_validator("prompt")
    @classmethod
    def _compiles(cls, prompt: str) -> str:
        compile_template(prompt, STEP_NAMES)
        return prompt

    @field_validator("json_schema")
    @classmethod
    def _schema_compiles(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            compile_schema(schema)
        return schema


class PipelineSpec(StrategySpec):
    """``kind: pipeline``: the ordered ``steps`` (at least one)."""

    kind: Literal["pipeline"]
    steps: tuple[StepSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _references_earlier_steps(self) -> PipelineSpec:
        errors, seen = [], set[str]()
        for i, step in enumerate(self.steps):
            if step.name in seen:
                errors.append(_error(("steps", i, "name"), f"duplicate step {step.name!r}"))
            for ref in sorted(step_refs(step.prompt)[0] - seen):
                where = "a later step" if ref in {s.name for s in self.steps} else "no step"
                errors.append(_error(("steps", i, "prompt"), f"the template reads steps."
                                     f"{ref}, which is {where}; it may read only earlier "
                                     "steps"))
            seen.add(step.name)
        if errors:
            raise ValidationError.from_exception_data("PipelineSpec", errors)
        return self

    def pool_refs(self) -> list[tuple[tuple[Any, ...], str]]:
        """Every step's pool."""
        return [(("steps", i, "pool"), s.pool) for i, s in enumerate(self.steps)]


def _error(loc: tuple[Any, ...], message: str) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError("pipeline", message), loc=loc, input=None)


@dataclasses.dataclass(frozen=True)
class Step:
    """A built step: its ``spec``, compiled ``template`` and ``validator`` (or None), and
    ``reads`` (``request`` and the names of the steps its template reads)."""

    spec: StepSpec
    template: Any
    validator: jsonschema.protocols.Validator | None
    reads: tuple[str, ...]


def build_pipeline(spec: PipelineSpec, ctx: KindContext) -> PipelineStrategy:
    """The PipelineStrategy a ``pipeline`` file describes (templates, schemas compiled)."""
    steps = []
    for s in spec.steps:
        names, uses_request = step_refs(s.prompt)
        steps.append(Step(s, compile_template(s.prompt, STEP_NAMES),
                          None if s.json_schema is None else compile_schema(s.json_schema),
                          (("request",) if uses_request else ()) + tuple(sorted(names))))
    members = tuple(b.id for b in ctx.backends.values() if b.pool == spec.steps[-1].pool)
    plan = RoutePlan(spec.steps[-1].pool, f"pipeline of {len(steps)} steps", members, (),
                     ctx.max_attempts + len(steps) - 1)
    return PipelineStrategy(tuple(steps), plan)


class PipelineStrategy(Runner):
    """Runs ``steps`` in order; ``plan`` names the last step's pool and the request's
    attempt budget (one first attempt per step plus the shared retries)."""

    def __init__(self, steps: tuple[Step, ...], plan: RoutePlan):
        self._steps = steps
        self._plan = plan

    def plan(self, request: ChatRequest, intent: Intent) -> RoutePlan:
        """The plan: the last step's pool, every attempt of every step."""
        return self._plan

    def describe(self, request: ChatRequest, intent: Intent, score: Scorer
                 ) -> dict[str, Any]:
        """``{"steps": [{name, pool, reads, schema, timeout_s, max_tokens}, …]}`` in order;
        ``reads`` are the template's inputs (``request`` and earlier step names),
        ``schema`` whether the output must satisfy a JSON Schema."""
        return {"steps": [{"name": s.spec.name, "pool": s.spec.pool, "reads": list(s.reads),
                           "schema": s.validator is not None, "timeout_s": s.spec.timeout_s,
                           "max_tokens": s.spec.max_tokens} for s in self._steps]}

    async def serve(self, run: Run) -> Served:
        """Run every step; see the module docstring. Raises the failing step's error."""
        context = {"last_user": last_user(run.request), "model": run.request.model}
        outputs: dict[str, dict[str, Any]] = {}
        usage: dict[str, int] = {}
        hops: list[dict[str, str]] = []
        for i, step in enumerate(self._steps[:-1]):
            prompt = self._prompt(run, step, context, outputs)
            request = leg_request(run.request, prompt, f"step-{step.spec.name}",
                                  step.spec.max_tokens or STEP_TOKENS)
            backend, answer = await self._ask(run, step, request, len(self._steps) - 1 - i)
            outputs[step.spec.name] = _output(step, answer)
            add_usage(usage, answer)
            hops.append(_hop(run, step, backend))
        last = self._steps[-1]
        request = last_step_request(run.request, self._prompt(run, last, context, outputs),
                                    f"step-{last.spec.name}", last.spec.max_tokens)
        if request.stream and last.validator is None:
            return await self._stream(run, last, request, usage)
        backend, answer = await self._ask(run, last, non_streamed(request))
        add_usage(usage, answer)
        body = {**answer, "usage": usage, "llmroute": {
            **(answer.get("llmroute") or {}), "pipeline": [*hops, _hop(run, last, backend)]}}
        return Served(body, _headers(backend, self._steps))

    async def _stream(self, run: Run, last: Step, request: ChatRequest,
                      usage: dict[str, int]) -> Served:
        """The last step streamed to the client, earlier usage added to its usage chunk."""
        name = last.spec.name
        try:
            async with asyncio.timeout(last.spec.timeout_s):
                backend, stream = await run.legs.stream(request, [last.spec.pool])
        except TimeoutError:
            raise self._failed(run, last, _timeout(last)) from None
        except LLMRouteError as err:
            raise self._failed(run, last, err) from err
        run.trace.step("pipeline_step", **_hop(run, last, backend), output="(streamed)")
        return Served({"llmroute": {"pipeline_step": name}}, _headers(backend, self._steps),
                      stream=with_usage(stream, usage))

    async def _ask(self, run: Run, step: Step, request: ChatRequest, later: int = 0
                   ) -> tuple[Backend, dict[str, Any]]:
        """One step's answer (asked again once when it fails its schema), ``later`` first
        attempts kept back for the steps after it; noted in the trace. Raises the step's
        error (its message names the step)."""
        pool = step.spec.pool
        try:
            async with asyncio.timeout(step.spec.timeout_s):
                backend, answer = await run.legs.complete(request, pool, later)
                problem = _problem(step, answer)
                if problem is not None:
                    run.trace.step("pipeline_step", **_hop(run, step, backend),
                                   output=answer_text(answer)[:OUTPUT_IN_TRACE],
                                   failed=problem, retry=True)
                    retry = retry_request(request, answer_text(answer), problem)
                    backend, answer = await run.legs.complete(retry, pool, later)
                    problem = _problem(step, answer)
        except TimeoutError:
            raise self._failed(run, step, _timeout(step)) from None
        except LLMRouteError as err:
            raise self._failed(run, step, err) from err
        if problem is not None:
            raise self._failed(run, step, UpstreamProtocolError(
                f"its answer does not satisfy its schema after one retry: {problem}",
                backend_id=backend.id, code="step_schema_failed"))
        run.trace.step("pipeline_step", **_hop(run, step, backend),
                       output=answer_text(answer)[:OUTPUT_IN_TRACE])
        return backend, answer

    def _prompt(self, run: Run, step: Step, context: dict[str, Any],
                outputs: dict[str, dict[str, Any]]) -> str:
        try:
            return render(step.template, context, outputs)
        except ValueError as exc:
            raise self._failed(run, step, UpstreamProtocolError(
                f"its prompt cannot be rendered: {exc}", code="step_template_failed")
            ) from exc

    def _failed(self, run: Run, step: Step, err: LLMRouteError) -> LLMRouteError:
        """``err`` with its message naming ``step``; noted in the trace."""
        name = step.spec.name
        run.trace.step("pipeline_step", hop_id=f"{run.request.request_id}/{name}",
                       trace_id=run.trace.trace_id, step_name=name, pool=step.spec.pool,
                       failed=err.message)
        err.message = f"pipeline step {name!r} (pool {step.spec.pool}) failed: {err.message}"
        err.args = (err.message,)
        return err


def _problem(step: Step, answer: dict[str, Any]) -> str | None:
    if step.validator is None:
        return None
    return schema_problem(step.validator, answer_text(answer))


def _output(step: Step, answer: dict[str, Any]) -> dict[str, Any]:
    """What later templates read of a step: ``output`` (text) and ``json`` (with a schema)."""
    text = answer_text(answer)
    return {"output": text, "json": json_of(text) if step.validator is not None else None}


def _hop(run: Run, step: Step, backend: Backend) -> dict[str, str]:
    rid = run.request.request_id
    refs = [r if r == "request" else f"{rid}/{r}" for r in step.reads]
    return {"hop_id": f"{rid}/{step.spec.name}", "input_ref": ",".join(refs) or "-",
            "trace_id": run.trace.trace_id, "step_name": step.spec.name, "pool": step.spec.pool,
            "backend": backend.id}


def _headers(backend: Backend, steps: tuple[Step, ...]) -> dict[str, str]:
    return {"x-llmroute-backend": backend.id, "x-llmroute-pool": backend.pool,
            "x-llmroute-steps": ",".join(s.spec.name for s in steps)}


def _timeout(step: Step) -> UpstreamTimeout:
    return UpstreamTimeout(f"it took longer than its timeout_s of {step.spec.timeout_s:g} s",
                           phase="total", code="step_timeout")
