"""Quality ejection as the observer sees it: each finished trace read as the answers it
holds (``answers_of``), the note a request's trace gets when its pool has a demoted backend
(``quality_note``), and every state change as an event — a log line, counters, an audit
record (``QualityEvents``) — plus the gauges at scrape time (``QualityCollector``).

**What makes an answer bad** (``answers_of``, read off the trace's steps in order): every
leg that gave output (a streamed leg with a first token, or a successful non-streamed
answer) is one answer of its backend. It is bad when

* ``handoff``: the fuse handed the stream off from it (a ``handoff`` or ``dead_end`` step
  of that backend: the melt);
* ``verify``: a verifier failed it: the n-th ``verify`` step of a pool checks the n-th
  successful answer from that pool (a verify step is timed from the previous step, not
  from its draft's attempt, so the order of the steps cannot pair them);
* ``empty``: it is the answer the client got, it finished, and its text is empty (and not
  a tool call);
* ``truncated``: it is the answer the client got, it finished with ``length`` and its
  ``usage.completion_tokens`` are fewer than the client's ``max_tokens`` (an engine that
  cuts answers short; without a usage count a stream is not judged on this).

Its ``entropy`` is the leg's mean token entropy (the attempt step's ``entropy``, nats) when
the fuse measured one. Cost per request: one pass over its steps (a handful).

Families: ``llmroute_backend_quality_state{backend}`` (0 healthy, 1 probing, 2 cut, 3
ejected), ``llmroute_backend_quality_answers{backend}`` (answers in the window, the
fleet's when shared), ``llmroute_backend_bad_answer_ratio{backend}`` (0–1),
``llmroute_backend_quality_entropy_nats{backend}`` (the window's mean of the answers' mean
token entropies), ``llmroute_quality_transitions_total{backend, to}`` and
``llmroute_quality_refusals_total{backend}`` (demotions the pool or fleet bounds refused).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from llmroute.observe.trace import Trace
from llmroute.types import Answer, Candidate, QualityView

log = structlog.get_logger("llmroute.quality")
STATE_CODES = {"healthy": 0, "probing": 1, "cut": 2, "ejected": 3}


def answers_of(trace: Trace, text: str | None, at: float,
               pool_of: Mapping[str, str] | None = None) -> list[Answer]:
    """The answers ``trace`` holds, each good or bad (module docstring), dated ``at``
    (the caller's clock, s); ``text`` is the answer the client got (None: unknown);
    ``pool_of`` maps backend ids to pools (for the verifier's verdicts; None: not read)."""
    out: list[Answer] = []
    last: dict[str, int] = {}  # backend id → index of its latest answer in ``out``
    succeeded: list[int] = []  # indices of the answers whose attempt succeeded
    max_tokens, verdicts = None, []
    for step in trace.steps:
        f, name = step.fields, step.name
        if name == "attempt" and (f["ok"] or f["ttft_ms"] is not None):
            last[f["backend"]] = len(out)
            if f["ok"]:
                succeeded.append(len(out))
            out.append(Answer(f["backend"], at, None, f.get("entropy")))
        elif name in ("handoff", "dead_end") and f["backend"] in last:
            _mark(out, last[f["backend"]], "handoff")
        elif name == "verify":
            verdicts.append((f.get("pool"), f.get("passed")))
        elif name == "receive":
            max_tokens = f.get("max_tokens")
    if verdicts and pool_of:
        _verified(out, succeeded, verdicts, pool_of)
    final = trace.summary.get("backend")
    if trace.status == 200 and final in last:
        why = _final_flaw(trace.summary, text, max_tokens)
        if why is not None:
            _mark(out, last[final], why)
    return out


def _verified(out: list[Answer], succeeded: list[int], verdicts: list[tuple[Any, Any]],
              pool_of: Mapping[str, str]) -> None:
    """Mark bad the answers the verifier failed: the n-th verdict on a pool judges the n-th
    successful answer from that pool."""
    drafts: dict[str, list[int]] = {}
    for i in succeeded:
        drafts.setdefault(pool_of.get(out[i].backend_id, ""), []).append(i)
    seen: dict[Any, int] = {}
    for pool, passed in verdicts:
        n = seen[pool] = seen.get(pool, -1) + 1
        mine = drafts.get(pool, [])
        if passed is False and n < len(mine):
            _mark(out, mine[n], "verify")


def _mark(out: list[Answer], i: int, why: str) -> None:
    """Mark answer ``i`` bad for ``why`` unless it is bad already."""
    if out[i].bad is None:
        out[i] = out[i]._replace(bad=why)


def _final_flaw(summary: Mapping[str, Any], text: str | None, max_tokens: Any) -> str | None:
    """``empty`` or ``truncated`` for the answer the client got (module docstring)."""
    finish = summary.get("finish_reason")
    if finish is None or finish == "tool_calls":
        return None
    if text is not None and not text.strip():
        return "empty"
    usage = summary.get("usage")
    done = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if finish == "length" and isinstance(max_tokens, int) and isinstance(done, int) \
            and done < max_tokens:
        return "truncated"
    return None


def quality_note(views: Mapping[str, QualityView], backend_ids: Sequence[str],
                 candidates: Sequence[Candidate]) -> dict[str, Any] | None:
    """The ``quality`` step of a request whose plan names a demoted backend:
    ``{"demoted": {backend: state}, "chosen": backend, "chosen_demoted": bool}``; None when
    none of ``backend_ids`` is demoted (nothing is noted)."""
    demoted = {b: views[b].state.value for b in backend_ids if b in views}
    if not demoted:
        return None
    chosen = candidates[0].backend.id if candidates else None
    return {"demoted": demoted, "chosen": chosen, "chosen_demoted": chosen in demoted}


class Audit(Protocol):
    """What the events need of the decision audit (``observe.audit.AuditLog``)."""

    def submit(self, item: Any) -> None:
        """Queue one ready record (never waits)."""
        ...


class QualityEvents:
    """Every transition of quality ejection as an event: a log line (warning for a
    demotion or refusal, info for a return), the counters of ``QualityCollector`` and, with
    the audit on, an audit record ``{"kind": "quality", "at" (epoch s), "request_id": "",
    "backend", "from", "to", "why", "evidence", "refused"}`` in the hash chain."""

    def __init__(self, audit: Audit | None, wall_clock: Callable[[], float]):
        self.audit, self._wall = audit, wall_clock
        self.transitions: Counter[tuple[str, str]] = Counter()
        self.refusals: Counter[str] = Counter()

    def emit(self, backend_id: str, old: str, new: str, why: str,
             evidence: Mapping[str, Any], refused: bool = False) -> None:
        """Record one transition (``old`` → ``new`` state names) or refusal."""
        if refused:
            self.refusals[backend_id] += 1
            log.warning("quality_demotion_refused", backend=backend_id, why=why, **evidence)
        else:
            self.transitions[backend_id, new] += 1
            level = log.info if new in ("healthy", "probing") else log.warning
            level("quality_state", backend=backend_id, state=new, was=old, why=why,
                  **evidence)
        if self.audit is not None:
            self.audit.submit({"kind": "quality", "at": self._wall(), "request_id": "",
                               "backend": backend_id, "from": old, "to": new, "why": why,
                               "evidence": dict(evidence), "refused": refused})


Report = Callable[[], Mapping[str, Mapping[str, Any]]]
"""``() -> {backend_id: {"state", "answers", "bad_ratio", "entropy", …}}`` now."""


class QualityCollector(Collector):
    """The quality families (module docstring) from ``report()`` and ``events``' counts."""

    def __init__(self, report: Report, events: QualityEvents):
        self._report, self._events = report, events

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """The gauges of every backend in the report, then the counters."""
        rows = self._report()
        for name, doc, key in (
                ("quality_state", "Quality ejection state: 0 healthy, 1 probing, 2 cut, "
                 "3 ejected", "state"),
                ("quality_answers", "Answers in the quality window", "answers"),
                ("bad_answer_ratio", "Bad answers per answer in the quality window, 0-1",
                 "bad_ratio"),
                ("quality_entropy_nats", "Mean token entropy of the answers in the quality "
                 "window, nats", "entropy")):
            family = GaugeMetricFamily(f"llmroute_backend_{name}", doc, labels=["backend"])
            for bid, row in rows.items():
                value = STATE_CODES[row["state"]] if key == "state" else row.get(key)
                if value is not None:
                    family.add_metric([bid], float(value))
            yield family
        moved = CounterMetricFamily("llmroute_quality_transitions", "Quality ejection state "
                                    "changes by backend and new state", labels=["backend", "to"])
        for (bid, to), n in sorted(self._events.transitions.items()):
            moved.add_metric([bid, to], float(n))
        yield moved
        refused = CounterMetricFamily("llmroute_quality_refusals", "Demotions refused by the "
                                      "pool or fleet bounds", labels=["backend"])
        for bid, n in sorted(self._events.refusals.items()):
            refused.add_metric([bid], float(n))
        yield refused
