"""What a cached answer is keyed by: the normalised request, within its scope.

``keys(request, scope)`` gives ``Keys(exact, context, query)``:

* ``exact`` — BLAKE2b-128 of the scope and the request as the engine would see it: the
  endpoint and the body less the fields that change only the answer's framing
  (``stream``, ``stream_options``, ``user``, ``metadata``, ``store``), with every text
  normalised (Unicode NFKC, whitespace runs collapsed, ends stripped) and a content list of
  text parts read as its text. Everything else — model, every message with the system
  prompt, tools, tool choice, response format, sampling fields (temperature, top_p, seed,
  max_tokens, stop, penalties, logit_bias, n, logprobs, …), unknown fields too — is in the
  hash, so an exact hit is the same request.
* ``context`` — the same hash with the last user turn's text left out: the semantic tier
  compares only requests whose everything-else is identical (same model, system prompt,
  earlier turns, tools, sampling), so an answer made for one system prompt or model is never
  served for another.
* ``query`` — the last user turn's text, normalised (what the semantic tier and its guards
  read).

``scope`` is the tenant (``""`` with auth off), the key id when ``cache.per_key``, and the
strategy and pool the request was planned on: entries never cross them.
"""

from __future__ import annotations

import re
import unicodedata
from hashlib import blake2b
from typing import Any, NamedTuple

import orjson

from llmroute.types import ChatRequest

FRAMING = frozenset({"stream", "stream_options", "user", "metadata", "store"})
"""Body fields that change how an answer is delivered or filed, not what it says."""

_SPACE = re.compile(r"\s+")


class Keys(NamedTuple):
    """``exact`` and ``context`` hashes (32 hex digits) and the ``query`` text."""

    exact: str
    context: str
    query: str


def normal(text: str) -> str:
    """``text`` NFKC-normalised, whitespace runs collapsed to one space, ends stripped."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def keys(request: ChatRequest, scope: tuple[str, ...]) -> Keys:
    """The request's ``Keys`` within ``scope`` (module docstring)."""
    body = {k: _normal_value(v) for k, v in request.body.items() if k not in FRAMING}
    last = _last_user(body)
    query = ""
    if last is not None:
        query = last["content"] if isinstance(last.get("content"), str) else ""
    exact = _digest(scope, request.endpoint, body)
    if last is not None:
        last["content"] = None
    elif isinstance(body.get("prompt"), str):
        query, body["prompt"] = body["prompt"], None
    return Keys(exact, _digest(scope, request.endpoint, body), query)


def _digest(scope: tuple[str, ...], endpoint: str, body: dict[str, Any]) -> str:
    data = orjson.dumps([scope, endpoint, body], option=orjson.OPT_SORT_KEYS)
    return blake2b(data, digest_size=16).hexdigest()


def _last_user(body: dict[str, Any]) -> dict[str, Any] | None:
    """The last user message of ``body`` (a copy, safe to change), or None."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, dict) and m.get("role") == "user":
            messages[i] = dict(m)
            return messages[i]
    return None


def _normal_value(value: Any) -> Any:
    """``value`` with every string normalised and text-only content lists read as text."""
    if isinstance(value, str):
        return normal(value)
    if isinstance(value, list):
        text = _text_parts(value)
        return text if text is not None else [_normal_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal_value(v) for k, v in value.items()}
    return value


def _text_parts(parts: list[Any]) -> str | None:
    """The text of a content list made only of ``{"type": "text", "text": …}`` parts."""
    if not parts or not all(isinstance(p, dict) and p.get("type") == "text"
                            and isinstance(p.get("text"), str) and len(p) == 2
                            for p in parts):
        return None
    return normal(" ".join(p["text"] for p in parts))
