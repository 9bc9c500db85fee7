"""Misbehaviour on cue: an emulated engine whose answers degrade, whose GPU runs hot or
whose link slows from a given model time on, so the router's self-healing can be shown end
to end (``bench/healing.py``).

All times are model seconds since the engine started (``EmulatedEngine.model_time``), like
every other emulator time; the link's delays are model seconds too (× ``time_scale`` on the
wall clock).

- **Degraded answers** (``degrade_at_s``): every answer that arrives after it is sampled
  from a flat distribution — the chosen token's probability 1–5 % and each listed
  alternative's 1–4 % (``text.TokenSource``), so its top-5 entropy bound is about 3.5–4.2
  nats instead of well under 1 — and ``truncate_share`` of them stop early, after a random
  10–50 % of their ``max_tokens``, still with ``finish_reason: "length"`` (an engine that
  cuts answers short).
- **A hot GPU** (``hot_at_s``): its cooling degrades — the steady temperature it heats
  towards runs ``hot_rise_c`` higher from then on (``gpu.GpuState``).
- **A slow link** (``slow_link_at_s``): its round trip grows and its bandwidth shrinks by
  ``slow_factor`` (5 by default) from then on. The ``link`` (``Link``: a round trip in
  model seconds, a bandwidth in bytes per model second) delays every request the engine
  gets — one round trip plus the request's bytes before the engine sees it — and every
  response chunk by its bytes over the bandwidth (``http.py``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Link:
    """The network between router and engine: ``rtt_s`` model seconds per round trip and
    ``bytes_per_s`` (per model second; None: unlimited)."""

    rtt_s: float = 0.0
    bytes_per_s: float | None = None

    def delay_s(self, nbytes: int, round_trips: int = 0) -> float:
        """Model seconds to send ``nbytes`` after ``round_trips`` round trips."""
        transfer = nbytes / self.bytes_per_s if self.bytes_per_s else 0.0
        return round_trips * self.rtt_s + transfer

    def slowed(self, factor: float) -> Link:
        """This link ``factor`` times slower: round trip × factor, bandwidth ÷ factor."""
        rate = None if self.bytes_per_s is None else self.bytes_per_s / factor
        return replace(self, rtt_s=self.rtt_s * factor, bytes_per_s=rate)


@dataclass(frozen=True, slots=True)
class Cues:
    """When an engine starts to misbehave, and how (module docstring); None: never."""

    degrade_at_s: float | None = None
    truncate_share: float = 0.5
    hot_at_s: float | None = None
    hot_rise_c: float = 25.0
    slow_link_at_s: float | None = None
    slow_factor: float = 5.0
    link: Link = Link()

    def degraded(self, t: float) -> bool:
        """True when an answer arriving at model time ``t`` is degraded."""
        return self.degrade_at_s is not None and t >= self.degrade_at_s

    def hot(self, t: float) -> bool:
        """True when the GPU's cooling has failed at model time ``t``."""
        return self.hot_at_s is not None and t >= self.hot_at_s

    def link_at(self, t: float) -> Link:
        """The link at model time ``t`` (slowed from ``slow_link_at_s`` on)."""
        if self.slow_link_at_s is not None and t >= self.slow_link_at_s:
            return self.link.slowed(self.slow_factor)
        return self.link

    def max_tokens(self, t: float, asked: int, rng: random.Random) -> int:
        """The tokens an answer arriving at ``t`` will have: ``asked``, or for a truncated
        degraded answer a random 10–50 % of it (at least 1)."""
        if not self.degraded(t) or rng.random() >= self.truncate_share:
            return asked
        return max(1, int(asked * rng.uniform(0.1, 0.5)))
