"""Saturation throughput: how many requests per model second an engine completes when it
never runs out of work — the capacity that load levels (e.g. "85 % of the fleet") refer to.

Measured by running the pure scheduler offline (no HTTP, no clock): every request of the
mix is queued at time 0 and served first-come first-served; the rate is taken between the
10th and the 90th percentile completions, which leaves out the ramp-up and the drain.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

from llmroute.emulator.scheduler import Sequence
from llmroute.emulator.spec import EngineSpec


def fits(spec: EngineSpec, prompt_tokens: int, max_tokens: int) -> bool:
    """True when the engine accepts a request of this size (``max_model_len``)."""
    return prompt_tokens + max_tokens <= spec.scheduler_config().max_model_len


def saturation_throughput(spec: EngineSpec, mix: Seq[tuple[int, int]]) -> float:
    """Completed requests per model second under a permanent backlog of ``mix``
    (``(prompt_tokens, max_tokens)`` pairs; the ones that do not fit are skipped).
    Raises ValueError when fewer than 10 requests of the mix fit."""
    sched = spec.scheduler()
    accepted = [(p, o) for p, o in mix if fits(spec, p, o)]
    if len(accepted) < 10:
        raise ValueError(f"only {len(accepted)} requests of the mix fit {spec.model_name} "
                         f"on {spec.profile}")
    for i, (p, o) in enumerate(accepted):
        sched.add(Sequence(str(i), p, o, 0.0))
    done: list[float] = []
    now = 0.0
    while (batch := sched.schedule(now)) is not None:
        now = batch.end
        done += [e.at for e in sched.complete(batch) if e.finished]
    lo, hi = len(done) // 10, len(done) * 9 // 10
    return (hi - lo) / (done[hi] - done[lo])
