"""The fan-out of ``kind: fusion``: every voter asked at once, each cut at the deadline, the
request's attempt budget shared out among them up front."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llmroute.errors import LLMRouteError
from llmroute.strategy.checks import mean_logprob
from llmroute.strategy.protocol import Run
from llmroute.types import Backend, ChatRequest


class Voter(Protocol):
    """A voter as the fan-out reads it: its ``pool`` and accuracy ``weight``."""

    pool: str
    weight: float


@dataclass(slots=True)
class Answered:
    """One voter's outcome: ``index`` (its place among the voters), the ``voter``, the
    ``backend`` that answered and its ``answer`` JSON (None when it did not), ``status``
    (``voted``, ``late``, ``failed: …``; the combiner may mark ``invalid: …``) and the
    answer's ``confidence`` (exp of its mean token logprob, 0–1; None without logprobs)."""

    index: int
    voter: Voter
    backend: Backend | None = None
    answer: dict[str, Any] | None = None
    status: str = "voted"
    confidence: float | None = None

    @property
    def vote_weight(self) -> float:
        """The weight of this answer in the vote: the pool's weight × its confidence (1
        when unknown)."""
        return self.voter.weight * (1.0 if self.confidence is None else self.confidence)

    def note(self) -> dict[str, Any]:
        """What the answer's ``llmroute.fusion.voters`` says of this voter."""
        return {"pool": self.voter.pool, "weight": self.voter.weight,
                "confidence": None if self.confidence is None else round(self.confidence, 6),
                "vote_weight": round(self.vote_weight, 6), "status": self.status,
                "backend": None if self.backend is None else self.backend.id}


def shares(available: int, voters: int) -> list[int]:
    """``available`` attempts shared out among ``voters``: as evenly as can be, the earlier
    voters getting the remainder (a voter may get 0 when fewer attempts than voters are
    left)."""
    base, extra = divmod(max(available, 0), voters)
    return [base + (i < extra) for i in range(voters)]


async def ask_voters(run: Run, request: ChatRequest, voters: Sequence[Voter],
                     deadline_s: float, keep: int = 0) -> list[Answered]:
    """Ask every voter ``request`` at once through ``run.legs`` (``keep`` attempts kept
    back for a later leg), each cut ``deadline_s`` seconds from now. One Answered per
    voter, in voter order; a leg's error becomes its status."""
    loop = asyncio.get_running_loop()
    when = loop.time() + deadline_s
    parts = shares(run.legs.left - keep, len(voters))
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_ask(run, request, Answered(i, voter), share, when))
                 for i, (voter, share) in enumerate(zip(voters, parts, strict=True))]
    return [t.result() for t in tasks]


async def _ask(run: Run, request: ChatRequest, out: Answered, share: int,
               when: float) -> Answered:
    reserve = max(run.legs.left - share, 0)
    try:
        async with asyncio.timeout_at(when):
            out.backend, out.answer = await run.legs.complete(request, out.voter.pool,
                                                              reserve)
    except TimeoutError:
        out.status = "late"
    except LLMRouteError as err:
        out.status = f"failed: {err.message}"
    if out.answer is not None:
        mean = mean_logprob(out.answer)
        out.confidence = None if mean is None else math.exp(mean)
    return out
