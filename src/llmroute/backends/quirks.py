"""Engine quirks: the request body each backend is sent, shaped to what its engine accepts.

What an engine kind accepts is a ``Quirks`` row of the engine table
(``backends/engines.py``); a backend's ``quirks:`` in config overrides single fields. From the
two, ``shaper`` builds the backend's ``Shaper`` once, when the backend is built
(``assemble/runtime.make_backends``); a request then pays one dict comprehension (the fields
the engine rejects dropped, ``model`` replaced) plus only the steps its engine needs, each a
key look-up when the body does not carry what it reshapes. A backend whose quirks are all
defaults gets no shaper at all: its body is the client's with ``model`` replaced.

The steps, in order (each leaves the client's own objects untouched, copying what it changes):

* ``drop``: top-level fields the engine rejects, never sent (``n``, ``seed``, …).
* ``budget_field``: the smaller of ``max_tokens`` / ``max_completion_tokens`` is sent in the
  one field the engine reads (Ollama and llama.cpp read ``max_tokens``), the other dropped.
* ``stream_options: streamed``: ``stream_options`` dropped from a non-streamed call.
* ``list_stop: false``: a list ``stop`` is sent as its first string (a one-item list loses
  nothing; the engine cannot take more).
* ``tool_choice_object: false``: a named-function ``tool_choice`` object becomes
  ``"required"`` with ``tools`` cut to that function (the same constraint, in the string
  form the engine knows).
* messages: ``developer_role: false`` sends ``developer`` as ``system``;
  ``string_content: true`` flattens a list of text parts into one string (parts that are not
  text, such as images, leave the message as it is); ``tool_call_content`` sets an assistant
  tool-call turn's ``content`` to ``null``, ``""`` or leaves it out (``absent``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from llmroute.backends.engines import Quirks, engine_kind
from llmroute.types import Backend, ChatRequest

Body = dict[str, Any]
Step = Callable[[Body], None]


class Shaper:
    """Shapes one backend's upstream bodies: ``shaper(body)`` → a new dict (``body`` and
    the objects in it are never changed) with ``model`` set to the served ``model``, the
    ``drop`` fields left out and every step applied in order; ``quirks`` is what it was
    built from."""

    __slots__ = ("_drop", "_model", "_steps", "_options", "quirks")

    def __init__(self, model: str, quirks: Quirks, steps: tuple[Step, ...]):
        self._model = model
        self._drop = quirks.drop | {"model"} if quirks.drop else None
        self._steps = steps
        self._options = quirks.stream_options == "streamed"
        self.quirks = quirks

    def __call__(self, body: Body) -> Body:
        drop = self._drop
        if drop is None:  # nothing dropped: one C-level copy
            out = {**body, "model": self._model}
        else:
            out = {k: v for k, v in body.items() if k not in drop}
            out["model"] = self._model
        if self._options and "stream_options" in out and not out.get("stream"):
            del out["stream_options"]  # stream_options: streamed (inline: the common quirk)
        for step in self._steps:
            step(out)
        return out


def quirks_of(shape: Callable[[Body], Body] | None) -> Quirks:
    """The quirks a backend's ``shape`` (``Backend.shape``) was built from: all defaults when
    it has none."""
    return shape.quirks if isinstance(shape, Shaper) else _DEFAULTS


_DEFAULTS = Quirks()


def resolve(engine: str, overrides: Mapping[str, Any] | None) -> Quirks:
    """Engine kind ``engine``'s quirks with ``overrides`` (field → value, from config)
    applied. Raises TypeError for an unknown field name."""
    base = engine_kind(engine).quirks
    return replace(base, **overrides) if overrides else base


def shaper(model: str, quirks: Quirks) -> Shaper | None:
    """The Shaper for a backend serving ``model`` with ``quirks``; None when the quirks
    are all defaults (the body goes as sent, ``model`` replaced)."""
    if quirks == Quirks():
        return None
    steps: list[Step] = []
    if quirks.budget_field is not None:
        steps.append(_budget_in(quirks.budget_field))
    if not quirks.list_stop:
        steps.append(_one_stop)
    if not quirks.tool_choice_object:
        steps.append(_named_tool_required)
    message = _message_step(quirks)
    if message is not None:
        steps.append(message)
    return Shaper(model, quirks, tuple(steps))


def smaller_budget(request: ChatRequest) -> int | None:
    """The output budget ``request`` carries to an engine that reads ``max_tokens`` alone
    (``budget_field`` set: llama.cpp, Ollama): the smaller of ``max_tokens`` /
    ``max_completion_tokens`` (what ``_budget_in`` sends), where every other engine reads
    ``max_completion_tokens or max_tokens`` (``request.max_tokens``). None: neither given."""
    body = request.body
    given = [v for v in (body.get("max_tokens"), body.get("max_completion_tokens"))
             if isinstance(v, int) and not isinstance(v, bool)]
    return min(given) if given else request.max_tokens


def carried_budget(request: ChatRequest, backend: Backend) -> int | None:
    """The output budget ``request`` carries to ``backend`` (``smaller_budget`` when its
    engine reads ``max_tokens`` alone, else ``request.max_tokens``)."""
    if quirks_of(backend.shape).budget_field is None:
        return request.max_tokens
    return smaller_budget(request)


def _budget_in(field: str) -> Step:
    other = "max_completion_tokens" if field == "max_tokens" else "max_tokens"

    def step(out: Body) -> None:
        theirs = out.pop(other, None)
        if isinstance(theirs, int):
            ours = out.get(field)
            out[field] = min(ours, theirs) if isinstance(ours, int) else theirs
    return step


def _one_stop(out: Body) -> None:
    stop = out.get("stop")
    if isinstance(stop, list):
        if stop:
            out["stop"] = stop[0]
        else:
            del out["stop"]


def _named_tool_required(out: Body) -> None:
    choice = out.get("tool_choice")
    if not isinstance(choice, dict):
        return
    name = (choice.get("function") or {}).get("name")
    tools = out.get("tools") or []
    named = [t for t in tools if isinstance(t, dict) and (t.get("function") or {}).get("name")
             == name]
    out["tool_choice"] = "required"
    if named:
        out["tools"] = named


_CONTENT = {"null": None, "empty": ""}


def _message_step(quirks: Quirks) -> Step | None:
    """One pass over ``messages`` doing every per-message change ``quirks`` asks for; None
    when there is none."""
    rename = not quirks.developer_role
    flatten = quirks.string_content
    tool_content = quirks.tool_call_content
    if not (rename or flatten or tool_content):
        return None

    def fix(m: Any) -> Any:
        if not isinstance(m, dict):
            return m
        if rename and m.get("role") == "developer":
            m = {**m, "role": "system"}
        if flatten and isinstance(m.get("content"), list):
            m = _flattened(m)
        if tool_content and m.get("role") == "assistant" and m.get("tool_calls"):
            m = _tool_turn(m, tool_content)
        return m

    def step(out: Body) -> None:
        messages = out.get("messages")
        if isinstance(messages, list):
            out["messages"] = [fix(m) for m in messages]
    return step


def _flattened(m: dict[str, Any]) -> dict[str, Any]:
    parts = m["content"]
    if not all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
        return m
    return {**m, "content": "".join(str(p.get("text", "")) for p in parts)}


def _tool_turn(m: dict[str, Any], form: str) -> dict[str, Any]:
    content = m.get("content")
    if content:
        return m  # a tool-call turn with real text keeps it
    if form == "absent":
        return {k: v for k, v in m.items() if k != "content"}
    return {**m, "content": _CONTENT[form]}
