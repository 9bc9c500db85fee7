"""The fuse for one streamed answer on one backend: ``Fuse.observe(event) -> FuseVerdict``.

Pure and synchronous (no I/O, no clock): dispatch turns every upstream chunk or failure into
a ``StreamEvent`` and acts on the verdict. Triggers:

* entropy: ``run_tokens`` consecutive tokens above ``threshold_nats`` (``fuse/entropy.py``),
  only when the entropy trigger is armed for the request (``fuse/arming.py``);
* failure: any event carrying a ``failure`` reason (cut, malformed chunk, in-band error,
  stall) hands off at once.

While armed it also sums every token's entropy, so the leg's ``mean_entropy`` (nats) can go
with its attempt into the trace, where quality ejection reads it (``fuse/ejection.py``).
"""

from __future__ import annotations

from llmroute.config import EntropyConfig
from llmroute.fuse.entropy import EntropyRun
from llmroute.types import FuseVerdict, StreamEvent

_CONTINUE = FuseVerdict()


class Fuse:
    """Watches one backend's stream. ``entropy`` None disarms the entropy trigger.
    ``entropy_sum`` (nats) and ``entropy_tokens`` add up every token's entropy seen (the
    leg's mean, for ``llmroute_fuse_mean_entropy_nats``)."""

    def __init__(self, entropy: EntropyConfig | None):
        self._run = None if entropy is None else EntropyRun(entropy.threshold_nats,
                                                             entropy.run_tokens)
        self.entropy_sum = 0.0
        self.entropy_tokens = 0

    @property
    def armed(self) -> bool:
        """True when the entropy trigger is on."""
        return self._run is not None

    @property
    def suspect(self) -> bool:
        """True while a run of high-entropy tokens is under way (a handoff may follow)."""
        return self._run is not None and self._run.length > 0

    @property
    def mean_entropy(self) -> float | None:
        """The mean entropy (nats) of the tokens observed so far; None when disarmed or
        before the first token."""
        return self.entropy_sum / self.entropy_tokens if self.entropy_tokens else None

    @property
    def window(self) -> tuple[float, ...]:
        """The recent per-token entropies in nats (empty when disarmed)."""
        return () if self._run is None else self._run.window

    def observe(self, event: StreamEvent) -> FuseVerdict:
        """The verdict for ``event``: hand off on a failure or an entropy run, else continue."""
        if event.failure is not None:
            return FuseVerdict(True, event.failure, self.window)
        fired = False
        if self._run is not None:
            for h in event.entropies:
                fired = self._run.push(h) or fired
                self.entropy_sum += h
            self.entropy_tokens += len(event.entropies)
        return FuseVerdict(True, "entropy", self.window) if fired else _CONTINUE
