"""The pieces of a ``pipeline`` step (``strategy/pipeline.py``): its prompt template, the
requests it sends, and the usage summed over steps.

A step's ``prompt`` is a Jinja template run in Jinja's sandbox over ``request``
(``request.last_user``, ``request.model``) and ``steps`` (``steps.<name>.output``, the
text of an earlier step, and ``steps.<name>.json``, its JSON value when it had a schema).
At load, ``step_refs`` finds the steps a template names (``steps.x`` or ``steps['x']``) so
a reference to a missing or later step is refused; at run time only earlier steps are in
``steps``, so anything else is an error naming the step.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.sandbox import SandboxedEnvironment

from llmroute.backends.sse import encode_json
from llmroute.types import ChatRequest

STEP_NAMES = frozenset({"request", "steps"})
"""The names a step's template may use."""

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def step_refs(text: str) -> tuple[set[str], bool]:
    """``(steps named, uses request)`` of a template ``text`` (already known to compile):
    the names of every ``steps.<name>`` / ``steps['<name>']`` it reads."""
    tree = SandboxedEnvironment().parse(text)
    named = {n.attr for n in tree.find_all(nodes.Getattr) if _is_steps(n.node)}
    named |= {n.arg.value for n in tree.find_all(nodes.Getitem)
              if _is_steps(n.node) and isinstance(n.arg, nodes.Const)
              and isinstance(n.arg.value, str)}
    uses_request = any(n.name == "request" for n in tree.find_all(nodes.Name))
    return named, uses_request


def _is_steps(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Name) and node.name == "steps"


def render(template: jinja2.Template, request: dict[str, Any],
           steps: dict[str, dict[str, Any]]) -> str:
    """The step's prompt. Raises ValueError when the template reads what is not there (a
    later step, a missing field) or breaks the sandbox's rules."""
    try:
        return template.render(request=request, steps=steps)
    except (jinja2.UndefinedError, jinja2.exceptions.SecurityError) as exc:
        raise ValueError(str(exc)) from exc


def last_step_request(parent: ChatRequest, prompt: str, suffix: str,
                      max_tokens: int | None) -> ChatRequest:
    """The last step's request: the client's own (endpoint, stream, sampling fields) with
    its conversation replaced by ``prompt`` (one user turn, or the completion prompt);
    ``max_tokens`` fills in when the client gave none. Request id ``<parent>-<suffix>``."""
    body = dict(parent.body)
    if parent.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    limit = parent.max_tokens or max_tokens
    if parent.max_tokens is None and max_tokens is not None:
        body["max_tokens"] = max_tokens
    return ChatRequest(parent.endpoint, body, parent.model, parent.stream, prompt,
                       len(prompt) // 4 + 1, limit, f"{parent.request_id}-{suffix}")


def retry_request(request: ChatRequest, output: str, problem: str) -> ChatRequest:
    """``request`` asked again after its answer ``output`` failed its schema: the answer
    and the validation error are appended to the conversation."""
    messages = [*request.body["messages"], {"role": "assistant", "content": output},
                {"role": "user", "content": f"That answer is invalid ({problem}). Answer "
                 "again with only JSON that satisfies the required schema."}]
    body = {**request.body, "messages": messages}
    text = f"{request.text}\n{output}\n{problem}"
    return ChatRequest(request.endpoint, body, request.model, request.stream, text,
                       len(text) // 4 + 1, request.max_tokens, f"{request.request_id}-retry")


def add_usage(total: dict[str, int], answer: dict[str, Any]) -> None:
    """Add ``answer``'s ``usage`` (prompt, completion, total tokens) into ``total``."""
    usage = answer.get("usage")
    if isinstance(usage, dict):
        for key in USAGE_KEYS:
            n = usage.get(key)
            total[key] = total.get(key, 0) + (n if isinstance(n, int) else 0)


async def with_usage(stream: AsyncIterator[bytes], earlier: dict[str, int]
                     ) -> AsyncIterator[bytes]:
    """``stream`` (SSE bytes) with ``earlier`` steps' usage added into its usage chunk.
    Only events that carry ``"usage"`` are parsed; the rest pass as they are."""
    try:
        async for data in stream:
            yield _add_usage(data, earlier) if b'"usage"' in data else data
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def _add_usage(data: bytes, earlier: dict[str, int]) -> bytes:
    out = []
    for event in data.split(b"\n\n"):
        if event.startswith(b"data: {") and b'"usage"' in event:
            obj = json.loads(event[6:])
            if isinstance(obj.get("usage"), dict):
                add_usage(obj["usage"], {"usage": earlier})
                event = encode_json(obj).rstrip(b"\n")
        out.append(event)
    return b"\n\n".join(out)
