"""Named anchor profiles: scorer weights and a picker, chosen by ``anchor.preset``.

- ``default``: the ``ttft-headroom`` filter, then expected TTFT 0.1, KV cache 0.6, KV
  balance 0.45, engine queue 0.15, the router's in-flight count 0.15 and prefix affinity
  0.5. With ``prefix-affinity`` in the profile the filter and ``expected-ttft`` price only
  the prompt a backend has not cached (``anchor/prefix.py``), so affinity never keeps a
  request on a backend whose queue costs more than the prefill it saves; ``bench/prefix.py``
  (Mooncake trace, 8 engines with prefix caches) measured it against least-in-flight, a
  prefix-only policy and GIE's default weights (``docs/prefix.md``). On traffic without
  shared prefixes it changes nothing (every backend's match is 0). Tuned with
  ``bench/schedule.py`` (8 heterogeneous emulated engines, Azure trace at 85 % load;
  ``--scorers`` overrides weights for such runs). The headroom filter keeps only backends
  predicted to give the first token within 3× (or 1 s of) the soonest, at least the 3
  soonest: as a weighted term (0.25), ``expected-ttft`` was outvoted by the KV terms, which
  kept sending bursts to the T4/1B (a 318k-token cache that always looks free, a prefill
  queue of 60k tokens and 7 s predicted — correctly — at the time); with the filter (at
  2× / 500 ms) P95 TTFT fell
  from 2.3–3.7 s to 1.4–1.5 s over 1,000 requests. With the tail bounded by the filter,
  the KV terms can weigh more: ``kv-balance`` 0.45 (usage after placing the request,
  against the fleet's mean) with ``expected-ttft`` 0.1 gave full-run KV spreads of ±6.6–10.5
  (at 0.15/0.25: ±9.7–11.0, the L4s' small caches running fullest); 3× / 1 s, ±7.2–8.4;
  keeping at least the 3 soonest, ±7.6–7.9; with each request's KV share weighted by the
  engine's relative TPOT (``kv-balance``), ±6.1–7.7. Left out: ``latency`` (its p95-vs-baseline
  lags the queue it reports; from 0.15 up it hurt the tail) and ``throughput`` 0.2 (herded
  load onto the fastest engine until it queued: P95 TTFT 2.2× least-in-flight).
- ``round-robin``: no scorers; rotate (baseline).
- ``least-in-flight``: the router's in-flight count alone, argmax (what LiteLLM's
  least-busy routing does; baseline).
- ``seed-000``: exactly ``0.4 free VRAM + 0.3 idle GPU + 0.2 network − 0.1 queue``
  (network = ``network``, the router's own RTT and bytes/s to each engine, measured on its
  polls; idle GPU = ``gpu-util``; the queue term is a penalty on the queue load, see
  ``profile.py`` on negative weights). Before the network readings existed the net term was
  ``latency`` (the router's p95 against its baseline), which lags: it moves only once
  requests have already been slow.
- ``seed-001``: exactly ``0.3 free memory + 0.25 latency + 0.2 errors + 0.15 throughput
  + 0.1 health``.

Every preset runs the same filters, in order: pool membership, context fit (with the
KV-pressure rule), capability, breaker health, thermal (no new requests to a hot GPU while
another can take them; inert without temperature readings) and quality (a demoted backend's
share; inert while none is demoted); ``default`` then drops backends predicted to answer
much later than the soonest (``ttft-headroom``; ``anchor.ttft_headroom`` turns it on or
off for any preset). Before it, in every preset, ``sample`` bounds the work of a decision
in a large pool: above 128 survivors only 64 go on, the longest prefix holders and a random
rest (``anchor/filters/sample.py``). Each plugin is built with its own params from the config
(``config/anchor.py``); presets set weights, not params.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llmroute.config.anchor import AnchorConfig
from llmroute.errors import ConfigError

FILTERS = ("pool", "context-fit", "capability", "health", "thermal", "quality")
HEADROOM = "ttft-headroom"
SAMPLE = "sample"


@dataclass(frozen=True)
class Preset:
    """``weights`` as ``((scorer type name, weight), …)``, a ``picker`` type name and
    whether the ``ttft-headroom`` filter runs after ``FILTERS``."""

    weights: tuple[tuple[str, float], ...]
    picker: str = "argmax"
    headroom: bool = False

    def filters(self) -> tuple[str, ...]:
        """Filter type names, in order."""
        return (*FILTERS, SAMPLE, HEADROOM) if self.headroom else (*FILTERS, SAMPLE)


def presets() -> dict[str, Preset]:
    """Every built-in preset by name."""
    return {
        "default": Preset((("expected-ttft", 0.1), ("kv-cache", 0.6), ("kv-balance", 0.45),
                           ("queue-depth", 0.15), ("in-flight", 0.15),
                           ("prefix-affinity", 0.5)), headroom=True),
        "round-robin": Preset((), "round-robin"),
        "least-in-flight": Preset((("in-flight", 1.0),)),
        "seed-000": Preset((("free-vram", 0.4), ("gpu-util", 0.3), ("network", 0.2),
                            ("queue-depth", -0.1))),
        "seed-001": Preset((("free-vram", 0.3), ("latency", 0.25), ("error-rate", 0.2),
                            ("throughput", 0.15), ("health", 0.1))),
    }


def resolve(cfg: AnchorConfig) -> Preset:
    """The preset named by ``cfg.preset`` with ``cfg.scorers`` merged over its weights
    (0 removes a scorer), ``cfg.picker`` replacing its picker and ``cfg.ttft_headroom`` (when
    set) its headroom filter. Raises ConfigError for an unknown preset."""
    table = presets()
    if cfg.preset not in table:
        raise ConfigError(f"anchor.preset: unknown preset {cfg.preset!r} "
                          f"(known: {', '.join(table)})")
    base = table[cfg.preset]
    weights = _merge(dict(base.weights), {name: e.weight for name, e in cfg.scorers.items()})
    headroom = base.headroom if cfg.ttft_headroom is None else cfg.ttft_headroom
    return Preset(tuple(weights.items()), cfg.picker or base.picker, headroom)


def _merge(weights: dict[str, float], override: Mapping[str, float]) -> dict[str, float]:
    merged = {**weights, **override}
    return {name: w for name, w in merged.items() if w != 0}
