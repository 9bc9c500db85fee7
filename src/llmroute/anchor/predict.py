"""A request's predicted latency on one backend, in ms, from the router's own view of it.

``TTFT = overhead + (prompt tokens already waiting there + this prompt) × ms/token`` — the
fitted prefill model (``anchor/stats/prefill.py``, as ``expected-ttft`` ranks by), else the
backend's TTFT EWMA — then ``latency = TTFT + output tokens × ms per output token``, the
decode time per token being ``1000 / output_tps`` (output tokens per second of generation
time over the stats window: ``anchor/stats/router.py``). Any part the router has not seen
yet (no first token, no finished answer) is None.
"""

from __future__ import annotations

from llmroute.anchor.scorers.expected_ttft import expected_ttft_ms
from llmroute.types import BackendStats


def predicted_ms(stats: BackendStats | None, prompt_tokens: int, output_tokens: int
                 ) -> dict[str, float | None]:
    """``{"ttft", "per_output_token", "latency"}`` in ms for a ``prompt_tokens`` prompt and
    an ``output_tokens`` answer on the backend with ``stats`` (None: never seen)."""
    if stats is None:
        return {"ttft": None, "per_output_token": None, "latency": None}
    ttft = expected_ttft_ms(stats, prompt_tokens)
    if ttft is None:
        ttft = stats.ttft_ms
    tpot = 1000.0 / stats.output_tps if stats.output_tps else None
    latency = None if ttft is None or tpot is None else ttft + output_tokens * tpot
    return {"ttft": _ms(ttft), "per_output_token": _ms(tpot, 3), "latency": _ms(latency)}


def _ms(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)
