"""Input compression: what the gate's models read of a request, and its structural features.

Seed design (docs/gate.md §compression):

- only **user** turns are read (system prompts, assistant answers and tool results say little
  about what is being asked now); a completions request's prompt counts as one user turn;
- the **latest** user turn is weighted most: it leads the text, whole up to
  ``HEAD_CHARS + TAIL_CHARS`` (512 + 256) characters; a longer turn is cut tighter than the
  seed's 512 + 256, to its first and last ``INSTRUCTION_CHARS`` (256) characters, where a
  request around a pasted document states the task (measured on the public sets: slightly
  better macro-F1 than 512 + 256, and a third of the first-stage time); earlier user turns
  add at most ``EARLIER_CHARS`` (128) characters each, newest first, ``EARLIER_TURNS`` of them;
- fenced code blocks (```` ``` ````) are **not** encoded whole: each becomes one marker
  ``⟦code LANG N lines⟧`` and counts toward ``code_blocks``/``code_lines``;
- tool schemas are a feature (``has_tools``, ``tool_names``), never encoded;
- text is NFKC-normalised and lone surrogates are replaced, so any input is safe to hash;
  a turn is first cut to its first ``SCAN_HEAD_CHARS`` (8k) and last ``SCAN_TAIL_CHARS``
  (4k) characters, so a 1 MB prompt costs about what a 12 kB one does.

``Compressed.key`` (BLAKE2b of the text and features) keys the gate's cache.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmroute.types import ChatRequest

HEAD_CHARS = 512
TAIL_CHARS = 256
EARLIER_CHARS = 128
INSTRUCTION_CHARS = 256
SCAN_HEAD_CHARS = 8_000
SCAN_TAIL_CHARS = 4_000
EARLIER_TURNS = 2
MAX_TOOL_NAMES = 8
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_LATIN_WORD = re.compile(r"[A-Za-z]{3,}")


@dataclass(frozen=True, slots=True)
class Compressed:
    """The compressed request: ``text`` (≤ ~1 kB, what the models read), ``latest`` (the
    latest user turn, compressed; what the encoder reads), code-block counts, tool facts,
    ``turns`` (user turns), ``cjk`` (fraction 0–1 of letters that are CJK), ``mixed``
    (both CJK and Latin words present) and ``chars`` (user characters before compression)."""

    text: str
    latest: str
    code_blocks: int = 0
    code_lines: int = 0
    code_langs: tuple[str, ...] = ()
    has_tools: bool = False
    tool_names: tuple[str, ...] = ()
    turns: int = 1
    cjk: float = 0.0
    mixed: bool = False
    chars: int = 0

    @property
    def empty(self) -> bool:
        """Nothing to classify: no user text and no code."""
        return not self.text.strip()

    @property
    def key(self) -> str:
        """Cache key: BLAKE2b-128 hex of the text and every feature."""
        raw = repr((self.text, self.code_blocks, self.code_lines, self.code_langs,
                    self.has_tools, self.tool_names, self.turns))
        return hashlib.blake2b(raw.encode("utf-8", "replace"), digest_size=16).hexdigest()


def clean(text: str) -> str:
    """NFKC-normalised ``text`` with lone surrogates replaced by U+FFFD. Never raises."""
    safe = text.encode("utf-8", "replace").decode("utf-8")
    return unicodedata.normalize("NFKC", safe)


def span(text: str, head: int, tail: int) -> str:
    """The first ``head`` and last ``tail`` characters of ``text`` (all of it when short)."""
    if len(text) <= head + tail:
        return text
    return text[:head] + " … " + text[-tail:] if tail else text[:head]


def instruction_weighted(turn: str) -> str:
    """``turn`` itself when it fits ``HEAD_CHARS + TAIL_CHARS``; otherwise only its first and
    last ``INSTRUCTION_CHARS`` characters, where a request around a pasted document states
    the task (the document's body says little about the intent and costs time)."""
    if len(turn) <= HEAD_CHARS + TAIL_CHARS:
        return turn
    return turn[:INSTRUCTION_CHARS] + " … " + turn[-INSTRUCTION_CHARS:]


def strip_code(text: str) -> tuple[str, int, int, tuple[str, ...]]:
    """Replace fenced code blocks with markers: ``(text, blocks, lines, languages)``."""
    langs: list[str] = []
    lines = 0

    def marker(m: re.Match[str]) -> str:
        nonlocal lines
        lang = m.group(1).lower()[:16] or "plain"
        n = m.group(2).count("\n") + 1
        langs.append(lang)
        lines += n
        return f" ⟦code {lang} {n} lines⟧ "

    out = _FENCE.sub(marker, text)
    return out, len(langs), lines, tuple(dict.fromkeys(langs))


def user_turns(request: ChatRequest) -> list[str]:
    """The user turns' texts, oldest first; falls back to ``request.text`` as one turn."""
    messages = request.body.get("messages") if isinstance(request.body, Mapping) else None
    if not isinstance(messages, list):
        return [request.text or ""]
    turns = [_content_text(m.get("content")) for m in messages
             if isinstance(m, Mapping) and m.get("role") == "user"]
    return turns or [""]


def _content_text(content: Any) -> str:
    """A message's text: a string, or the ``text`` of its parts (images contribute nothing)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content
                         if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def tool_names(body: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the request's tools (``tools[].function.name`` or legacy ``functions``)."""
    tools = body.get("tools") or body.get("functions") or ()
    names = []
    for tool in tools if isinstance(tools, list) else ():
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            names.append(fn["name"][:64])
    return tuple(names[:MAX_TOOL_NAMES])


def compress(request: ChatRequest) -> Compressed:
    """Compress ``request`` (see the module docstring). Never raises for any body or text."""
    raw = user_turns(request)
    turns = [clean(span(t, SCAN_HEAD_CHARS, SCAN_TAIL_CHARS)) for t in raw]
    latest, blocks, lines, langs = strip_code(turns[-1])
    latest = instruction_weighted(latest.strip())
    earlier = [span(strip_code(t)[0].strip(), EARLIER_CHARS, 0)
               for t in reversed(turns[:-1][-EARLIER_TURNS:])]
    text = "\n".join([latest, *(e for e in earlier if e)])
    body = request.body if isinstance(request.body, Mapping) else {}
    names = tool_names(body)
    cjk, mixed = script_mix(text)
    return Compressed(text=text, latest=latest, code_blocks=blocks, code_lines=lines,
                      code_langs=langs, has_tools=bool(request.has_tools or names),
                      tool_names=names, turns=max(request.turns, len(turns), 1), cjk=cjk,
                      mixed=mixed, chars=sum(len(t) for t in raw))


def compress_text(text: str) -> Compressed:
    """Compress a bare prompt (CLI, labelled files): one user turn, no tools."""
    return compress(prompt_request(text))


def prompt_request(text: str, messages: Sequence[Mapping[str, Any]] | None = None,
                   tools: Iterable[Any] = ()) -> ChatRequest:
    """A chat ``ChatRequest`` for ``text`` (or OpenAI ``messages``), tokens ≈ chars / 4."""
    msgs = list(messages) if messages else [{"role": "user", "content": text}]
    tools = list(tools)
    joined = "\n".join(_content_text(m.get("content")) for m in msgs if isinstance(m, Mapping))
    body: dict[str, Any] = {"model": "auto", "messages": msgs}
    if tools:
        body["tools"] = tools
    users = sum(1 for m in msgs if isinstance(m, Mapping) and m.get("role") == "user")
    return ChatRequest(endpoint="chat", body=body, model="auto", stream=False, text=joined,
                       prompt_tokens=len(joined) // 4, max_tokens=None, request_id="gate",
                       has_tools=bool(tools), turns=max(users, 1))


def script_mix(text: str) -> tuple[float, bool]:
    """``(cjk fraction of letters 0–1, CJK and Latin words both present)`` of ``text``."""
    cjk = len(_CJK.findall(text))
    latin = sum(len(w) for w in _LATIN_WORD.findall(text))
    letters = cjk + latin
    return (cjk / letters if letters else 0.0), (cjk > 0 and latin > 0)
