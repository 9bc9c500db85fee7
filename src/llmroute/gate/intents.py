"""The intent labels the gate may return.

``INTENTS`` is the closed set of labels; its order is also the tie-break order when two
intents score exactly alike. ``DEFAULT_INTENT`` is the answer when there is nothing to
classify (empty or whitespace-only text) and the intent with a small prior otherwise.
"""

from __future__ import annotations

INTENTS: tuple[str, ...] = (
    "code",
    "math",
    "reasoning",
    "tool_call",
    "summarization",
    "translation",
    "extraction",
    "classification",
    "creative_writing",
    "open_qa",
    "chat",
    "brainstorming",
)

DEFAULT_INTENT = "chat"
