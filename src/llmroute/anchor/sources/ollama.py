"""Ollama ``GET /api/ps`` (JSON) → ``EngineSignals`` with ``loaded_models``.

A weaker signal than the other engines give: Ollama exposes no queue depth, no running
request count, no KV-cache usage and no latency histograms. ``/api/ps`` only says which
models are loaded and how much of each sits in GPU memory (``size_vram``, bytes; smaller
than ``size`` when the model is partly offloaded to CPU). Use it for "is the model warm,
and on the GPU", not for load balancing by queue.

``loaded_models`` is a tuple of ``(name, size_vram_bytes)``; an empty tuple means nothing is
loaded (a valid answer). A body that is not ``{"models": [...]}`` with a string ``name`` and
a non-negative integer ``size_vram`` in every entry → missing. Nothing raises.
"""

from __future__ import annotations

import json

from llmroute.anchor.sources.signals import build, unreadable
from llmroute.types import EngineSignals

SOURCE = "ollama"
EXPECTED = ("loaded_models",)


def parse_ollama_ps(json_text: str, taken_at: float) -> EngineSignals:
    """Loaded models from one ``/api/ps`` body; ``taken_at`` is the caller's clock (s)."""
    models = _models(json_text)
    if models is None:
        return unreadable(SOURCE, taken_at, EXPECTED)
    return build(SOURCE, taken_at, EXPECTED, {"loaded_models": models})


def _models(json_text: str) -> tuple[tuple[str, int], ...] | None:
    try:
        body = json.loads(json_text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return None
    entries = body.get("models") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        return None
    pairs = [_entry(e) for e in entries]
    return None if any(p is None for p in pairs) else tuple(pairs)  # type: ignore[arg-type]


def _entry(entry: object) -> tuple[str, int] | None:
    if not isinstance(entry, dict):
        return None
    name, vram = entry.get("name"), entry.get("size_vram")
    if not isinstance(name, str) or type(vram) is not int or vram < 0:
        return None
    return name, vram
