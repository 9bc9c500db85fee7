"""The answer stages' order (``flow/stages.py``): one tuple, outermost first, carried on the
Runtime (``Runtime.stages``). Each built-in is present only when its part is configured, so
a router without policies, priority classes, an answer cache, strategy files or word lists
runs none.

To add a stage, place it here: after ``UsageMeter`` and ``PrioritySlot`` its early answers
are metered and free their priority place like any other (``admit`` took both before any
stage runs); before ``OutputFilter`` it sees the answer as the client gets it.
"""

from __future__ import annotations

from llmroute.flow.cache import CachedAnswer
from llmroute.flow.call import Call
from llmroute.flow.stages import OutputFilter, PrioritySlot, TrialTiming, UsageMeter
from llmroute.runtime import Runtime, Stage


def answer_stages(rt: Runtime) -> tuple[Stage[Call], ...]:
    """``rt``'s stages: the usage meter (auth on), the priority slot (priority classes),
    the answer cache (``cache.enabled``), the trial timing (strategy files: a split or
    shadow may match), the output filter (word lists)."""
    stages: list[Stage[Call]] = []
    if rt.policy is not None:
        stages.append(UsageMeter())
    if rt.priority is not None:
        stages.append(PrioritySlot())
    if rt.cache is not None:
        stages.append(CachedAnswer(rt.cache))
    if rt.config.strategies is not None:
        stages.append(TrialTiming())
    if rt.content_filter is not None:
        stages.append(OutputFilter(rt.content_filter))
    return tuple(stages)
