"""Prefix continuation: the request that lets another engine finish an answer from the text
already streamed, in the form its engine kind supports (``backends/engines.py``).

* ``continue_final_message`` (vLLM, SGLang): the conversation plus an assistant message
  holding the prefix, with ``continue_final_message: true, add_generation_prompt: false``.
* assistant prefill (llama.cpp): the same trailing assistant message, nothing else; the
  engine continues it (and echoes it back, which the seam strips).
* generic (hosted OpenAI-compatible APIs, Ollama): the trailing assistant message followed
  by a user message ``CONTINUE_INSTRUCTION``. Any chat API accepts it; whether the model
  continues without repeating depends on the model, so this form is best effort.

Legacy completions continue by appending the prefix to a string ``prompt`` on any engine.
The output budget (``max_tokens`` / ``max_completion_tokens``) shrinks by the tokens
already streamed, never below 1.
"""

from __future__ import annotations

from typing import Any

from llmroute.backends.engines import Capabilities, ContinuationForm
from llmroute.types import Endpoint

CONTINUE_INSTRUCTION = ("Continue your previous message exactly where it stops, without "
                        "repeating any of it.")
_BUDGET_KEYS = ("max_tokens", "max_completion_tokens")


def continuation_body(body: dict[str, Any], endpoint: Endpoint, caps: Capabilities,
                      prefix: str, tokens_used: int) -> dict[str, Any] | None:
    """The request body that continues ``prefix`` (text already sent to the client) after
    ``tokens_used`` tokens; None when ``body`` cannot be continued (a completions
    ``prompt`` that is not one string)."""
    out = _shrink_budget(dict(body), tokens_used)
    if not prefix:
        return out
    if endpoint == "completions":
        prompt = body.get("prompt")
        return {**out, "prompt": prompt + prefix} if isinstance(prompt, str) else None
    messages, _ = with_prefix(body.get("messages") or [], prefix)
    out["messages"] = messages
    if caps.continuation is ContinuationForm.CONTINUE_FINAL_MESSAGE:
        out.update(continue_final_message=True, add_generation_prompt=False)
    elif caps.continuation is ContinuationForm.GENERIC:
        out["messages"] = [*messages, {"role": "user", "content": CONTINUE_INSTRUCTION}]
    return out


def leg_body(body: dict[str, Any], endpoint: Endpoint, caps: Capabilities, prefix: str,
             tokens_used: int, top_logprobs: int | None) -> dict[str, Any]:
    """The body for one backend's leg: the client's ``body``, continued after ``prefix`` when
    text was already streamed, asking for ``logprobs`` with at least ``top_logprobs``
    alternatives when that is not None (the fuse's entropy trigger is armed)."""
    if prefix:
        body = continuation_body(body, endpoint, caps, prefix, tokens_used) or body
    if top_logprobs is not None:
        top = max(body.get("top_logprobs") or 0, top_logprobs)
        body = {**body, "logprobs": True, "top_logprobs": top}
    return body


def can_continue(body: dict[str, Any], endpoint: Endpoint, prefix: str) -> bool:
    """False only for a legacy completions request with text streamed whose ``prompt`` is not
    one string (a batch or token ids): there is no prompt to append the prefix to."""
    return not (endpoint == "completions" and prefix and not isinstance(body.get("prompt"), str))


def with_prefix(messages: list[dict[str, Any]], prefix: str
                ) -> tuple[list[dict[str, Any]], str]:
    """``messages`` ending in an assistant message that holds ``prefix``, and that final
    message's whole content. A client's own trailing assistant message (its prefill) is
    extended rather than followed by a second one."""
    last = messages[-1] if messages else None
    if last and last.get("role") == "assistant" and isinstance(last.get("content"), str):
        content = last["content"] + prefix
        return [*messages[:-1], {**last, "content": content}], content
    return [*messages, {"role": "assistant", "content": prefix}], prefix


def echoed_text(body: dict[str, Any], endpoint: Endpoint, prefix: str) -> str:
    """The text an echoing engine repeats before its continuation of ``prefix``."""
    if endpoint == "completions" or not prefix:
        return ""
    return with_prefix(body.get("messages") or [], prefix)[1]


def _shrink_budget(body: dict[str, Any], tokens_used: int) -> dict[str, Any]:
    for key in _BUDGET_KEYS:
        if isinstance(body.get(key), int):
            body[key] = max(1, body[key] - tokens_used)
    return body
