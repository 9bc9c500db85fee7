"""The verifier's three checks of a draft (``kind: verify``), each giving a Verdict:

* ``json_schema`` — the draft's text (a fenced ```` ```json ```` block is unwrapped) must
  parse as JSON and satisfy a JSON Schema (draft 2020-12): the configured one, or with
  ``json_schema: request`` the request's ``response_format`` schema (``json_object``, or no
  ``response_format``: any JSON);
* ``judge`` — a prompt (a Jinja template over ``request.last_user`` and ``draft``, run in
  Jinja's sandbox) goes to a verifier pool, whose answer must say PASS or FAIL (the first
  of the two words counts; ``score: N`` optionally, checked against ``min_score``);
* ``logprob`` — the draft is asked with ``logprobs``; the mean token log-probability must
  be at least ``min_mean``.

A check that cannot reach a verdict (the judge errs or answers neither word) raises
VerifierFault, which the strategy turns into an error or returns the draft, as configured.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import jinja2
import jinja2.meta
import jsonschema
from jinja2.sandbox import SandboxedEnvironment
from pydantic import AfterValidator

from llmroute.errors import (
    InvalidRequest,
    LLMRouteError,
    NoBackendAvailable,
    UpstreamProtocolError,
)
from llmroute.strategy.answers import answer_text, last_user, leg_request
from llmroute.strategy.protocol import Run
from llmroute.types import ChatRequest

_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*\n(.*?)\n?```\s*$", re.S)
_WORD = re.compile(r"\b(pass|fail)(?:ed|es|s)?\b", re.I)
_SCORE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.I)
TEMPLATE_NAMES = frozenset({"request", "draft"})


@dataclass(frozen=True, slots=True)
class Verdict:
    """A check's outcome: ``passed``, why (``reason``), the judge's ``score`` if any."""

    passed: bool
    reason: str
    score: float | None = None


class VerifierFault(Exception):
    """The verifier could not reach a verdict; ``error`` is the OpenAI-shaped error to
    answer with when the strategy does not fall back to the draft."""

    def __init__(self, error: LLMRouteError):
        super().__init__(error.message)
        self.error = error


def compile_schema(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """A draft 2020-12 validator of ``schema``. Raises ValueError when it does not compile."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"the JSON Schema does not compile: {exc.message}") from exc
    return jsonschema.Draft202012Validator(schema)


def _compiled(schema: Any) -> Any:
    """A schema field's validator: a given schema must compile (``request`` and None pass)."""
    if isinstance(schema, dict):
        compile_schema(schema)
    return schema


SchemaRef = Annotated[dict[str, Any] | Literal["request"] | None, AfterValidator(_compiled)]
"""A strategy file's JSON Schema field: a schema (checked to compile at load), ``request``
(the request's own ``response_format`` schema) or None."""


def compile_template(text: str, allowed: frozenset[str] = TEMPLATE_NAMES) -> jinja2.Template:
    """``text`` as a sandboxed Jinja template that may use only the names ``allowed``
    (default ``request`` and ``draft``). Raises ValueError for a syntax error or another
    name."""
    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
    try:
        names = jinja2.meta.find_undeclared_variables(env.parse(text))
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"template syntax error at line {exc.lineno}: {exc.message}") from exc
    unknown = sorted(names - allowed)
    if unknown:
        raise ValueError(f"the template uses {', '.join(unknown)}; it may use only "
                         f"{', '.join(sorted(allowed))}")
    return env.from_string(text)


def json_of(text: str) -> Any:
    """The JSON value of an answer's ``text`` (a fenced ```` ```json ```` block is
    unwrapped). Raises json.JSONDecodeError."""
    fenced = _FENCE.match(text)
    return json.loads(fenced.group(1) if fenced else text)


def schema_problem(validator: jsonschema.protocols.Validator, text: str) -> str | None:
    """Why ``text`` is not JSON satisfying ``validator`` (``not JSON: …`` or
    ``schema: <path>: …``), None when it is."""
    try:
        value = json_of(text)
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc.msg} at character {exc.pos}"
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return f"schema: {where}: {error.message}"
    return None


class SchemaCheck:
    """The draft must be JSON satisfying ``validator`` (None: the request's schema)."""

    name = "json_schema"
    wants_logprobs = False

    def __init__(self, validator: jsonschema.protocols.Validator | None):
        self._validator = validator

    async def verdict(self, run: Run, draft: dict[str, Any]) -> Verdict:
        """See the module docstring. Raises InvalidRequest for a request schema that does
        not compile."""
        validator = self._validator or request_validator(run.request)
        problem = schema_problem(validator, answer_text(draft))
        return Verdict(problem is None, problem or "satisfies the schema")


def request_validator(request: ChatRequest) -> jsonschema.protocols.Validator:
    """The validator of the request's ``response_format`` schema (any JSON without one).
    Raises InvalidRequest when it does not compile."""
    fmt = request.body.get("response_format")
    spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
    schema = spec.get("schema") if isinstance(spec, dict) else None
    try:
        return compile_schema(schema if isinstance(schema, dict) else {})
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="response_format.json_schema.schema") from exc


class JudgeCheck:
    """A verifier ``pool`` judges the draft through ``template``; with ``min_score`` a
    PASS needs a ``score`` at least that high."""

    name = "judge"
    wants_logprobs = False

    def __init__(self, pool: str, template: jinja2.Template, min_score: float | None):
        self.pool = pool
        self._template = template
        self._min_score = min_score

    async def verdict(self, run: Run, draft: dict[str, Any]) -> Verdict:
        """Ask the judge. Raises VerifierFault when it errs or answers nonsense."""
        prompt = self._template.render(request={"last_user": last_user(run.request)},
                                       draft=answer_text(draft))
        try:
            backend, answer = await run.legs.complete(
                leg_request(run.request, prompt, "judge"), self.pool)
        except LLMRouteError as err:
            raise VerifierFault(NoBackendAvailable(
                f"the verifier (pool {self.pool}) failed: {err.message}")) from err
        return self.read(answer_text(answer), backend.id)

    def read(self, text: str, backend_id: str) -> Verdict:
        """The judge's ``text`` as a Verdict. Raises VerifierFault for nonsense."""
        word = _WORD.search(text)
        if word is None:
            raise VerifierFault(UpstreamProtocolError(
                f"the verifier (pool {self.pool}) answered neither PASS nor FAIL: "
                f"{text[:200]!r}", backend_id=backend_id))
        found = _SCORE.search(text)
        score = float(found.group(1)) if found else None
        passed = word.group(1).lower() == "pass"
        if passed and self._min_score is not None and score is not None:
            passed = score >= self._min_score
        return Verdict(passed, f"judge: {text.strip()[:200]}", score)


class LogprobCheck:
    """The draft's mean token log-probability must be at least ``min_mean``."""

    name = "logprob"
    wants_logprobs = True

    def __init__(self, min_mean: float):
        self._min_mean = min_mean

    async def verdict(self, run: Run, draft: dict[str, Any]) -> Verdict:
        """See the module docstring; a draft without logprobs fails."""
        mean = mean_logprob(draft)
        if mean is None:
            return Verdict(False, "the draft carries no logprobs")
        ok = mean >= self._min_mean
        return Verdict(ok, f"mean logprob {mean:.3f} {'≥' if ok else '<'} {self._min_mean}",
                       mean)


def mean_logprob(answer: dict[str, Any]) -> float | None:
    """The mean of the first choice's token logprobs, None when it has none."""
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else {}
    logprobs = first.get("logprobs") if isinstance(first, dict) else None
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    values = [t["logprob"] for t in content or () if isinstance(t, dict)
              and isinstance(t.get("logprob"), int | float)]
    return sum(values) / len(values) if values else None
