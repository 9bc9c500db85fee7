"""One cached answer (``Entry``) and its wire form, shared with the other replicas.

An entry holds the complete answer (a non-streamed chat or completions body: a stream is
stored assembled, ``cache/collect.py``), what it was asked for (``exact`` and ``context``
keys, the ``query`` text, its ``anchors`` and gate ``intent``, the encoder's ``vector``),
whose it is (``tenant``, ``key_id``), the ``request_id`` whose answer it is (a hit names
it: the audit record links the two), and when it was made and lapses (epoch s).

``encode(entry)`` → bytes: orjson of the fields, the vector as base64 float32.
``decode(data, dim, max_bytes)`` raises ``BadEntry`` for anything that is not one whole,
well-typed entry (bad JSON, a missing or mistyped field, a vector of another dimension or
not of unit length, an answer without choices, more than ``max_bytes``): such an entry is
dropped and counted by the caller, never served.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from llmroute.cache.anchors import Anchors


class BadEntry(ValueError):
    """An entry that does not decode (module docstring)."""


@dataclass(slots=True)
class Entry:
    """A cached answer (module docstring). ``size`` is its encoded length in bytes (what
    the cache's byte bound counts)."""

    id: str
    tenant: str
    key_id: str
    exact: str
    context: str
    query: str
    anchors: Anchors
    intent: str
    answer: dict[str, Any]
    request_id: str
    created: float
    expires: float
    vector: np.ndarray | None = None
    size: int = field(default=0, compare=False)


def encode(entry: Entry) -> bytes:
    """The entry's wire form (module docstring)."""
    vector = None if entry.vector is None else base64.b64encode(
        np.asarray(entry.vector, dtype=np.float32).tobytes()).decode()
    return orjson.dumps({
        "id": entry.id, "tenant": entry.tenant, "key_id": entry.key_id,
        "exact": entry.exact, "context": entry.context, "query": entry.query,
        "anchors": entry.anchors.as_lists(), "intent": entry.intent, "answer": entry.answer,
        "request_id": entry.request_id, "created": entry.created, "expires": entry.expires,
        "vector": vector})


_TEXT = ("id", "tenant", "key_id", "exact", "context", "query", "intent", "request_id")


def decode(data: bytes, dim: int | None, max_bytes: int) -> Entry:
    """The Entry in ``data``; its vector must have ``dim`` components (None: any). Raises
    BadEntry (module docstring)."""
    if len(data) > max_bytes:
        raise BadEntry(f"entry of {len(data)} bytes, over {max_bytes}")
    try:
        raw = orjson.loads(data)
        if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in _TEXT):
            raise BadEntry("entry: a text field is missing")
        answer, created, expires = raw["answer"], raw["created"], raw["expires"]
        if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list) \
                or not answer["choices"]:
            raise BadEntry("entry: the answer has no choices")
        if not isinstance(created, float | int) or not isinstance(expires, float | int):
            raise BadEntry("entry: bad times")
        return Entry(*(raw[k] for k in _TEXT[:6]), Anchors.from_lists(raw["anchors"]),
                     raw["intent"], answer, raw["request_id"], float(created), float(expires),
                     _vector(raw.get("vector"), dim), len(data))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, binascii.Error) as exc:
        if isinstance(exc, BadEntry):
            raise
        raise BadEntry(f"entry: {exc}") from exc


def _vector(text: Any, dim: int | None) -> np.ndarray | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise BadEntry("entry: the vector is not base64 text")
    vector = np.frombuffer(base64.b64decode(text, validate=True), dtype=np.float32)
    if (dim is not None and vector.shape != (dim,)) or not np.isfinite(vector).all() \
            or abs(float(vector @ vector) - 1.0) > 1e-3:
        raise BadEntry("entry: the vector has another dimension or is not of unit length")
    return vector
