"""Input compression: what the gate's models read of a request, and its structural features.

Seed design (docs/gate.md §compression):

- only **user** turns are read (system prompts, assistant answers and tool results say little
  about what is being asked now); a completions request's prompt counts as one user turn;
- the **latest** user turn is weighted most: it leads the text, cut to its first
  ``LATEST_HEAD_CHARS`` (512) and last ``LATEST_TAIL_CHARS`` (256) characters (the seed
  design: a request around a pasted document states the task at its start or its end);
  earlier user turns add at most ``EARLIER_CHARS`` (128) characters each, newest first,
  ``EARLIER_TURNS`` of them;
- fenced code blocks (```` ``` ````) are **not** encoded whole: each becomes one marker
  ``⟦code LANG N lines⟧`` and counts toward ``code_blocks``/``code_lines``;
- tool schemas are a feature (``has_tools``, ``tool_names``), never encoded;
  ``tool_match``: a word of at least ``TOOL_WORD_MIN`` letters from a tool's name (split at
  ``_``, ``.``, ``-`` and camelCase) starts a word of the latest turn, compared on its first
  ``TOOL_STEM`` letters (``calculate_integral`` matches "the integral of …", ``integrate``
  matches "integration") — the request asks for what a supplied tool does;
- ``pasted``: the latest turn carries pasted material the request is *about* rather than
  conversation with the assistant: a transcript (at least ``TRANSCRIPT_LINES`` lines shaped
  ``Speaker: text``) or more than ``PASTED_CHARS`` characters;
- ``document``: the latest turn supplies a text to work on: it is ``pasted``, or it has a
  line of at least ``DOC_LINE_CHARS`` characters and at least one other line (a passage
  plus an instruction or question about it);
- ``choices``: the latest turn (as compressed) offers a label set to pick from:
  ``Options:``, ``Choices:``, ``Categories:``, ``Labels:`` (or 选项/类别/标签, with ``:``
  or ``：``);
- text is NFKC-normalised and lone surrogates are replaced, so any input is safe to hash;
  a turn is first cut to its first ``SCAN_HEAD_CHARS`` (8k) and last ``SCAN_TAIL_CHARS``
  (4k) characters, so a 1 MB prompt costs about what a 12 kB one does.

The windows live in ``constants`` beside the rules classifier's (wider) one.

``Compressed.key`` (BLAKE2b of the text and features) keys the gate's cache.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmroute.gate.constants import (
    EARLIER_CHARS,
    EARLIER_TURNS,
    LATEST_HEAD_CHARS,
    LATEST_TAIL_CHARS,
    SCAN_HEAD_CHARS,
    SCAN_TAIL_CHARS,
)
from llmroute.text import CJK_CHARS
from llmroute.types import ChatRequest

MAX_TOOL_NAMES = 8
TRANSCRIPT_LINES = 3
PASTED_CHARS = 1500
DOC_LINE_CHARS = 400
TOOL_WORD_MIN = 4
TOOL_STEM = 5
_CHOICES = re.compile(r"\b(?:options|choices|categories|labels)[^\S\n]*[:：]"
                      r"|(?:选项|类别|标签)[^\S\n]*[:：]", re.IGNORECASE)
_SPEAKER = re.compile(r"^[^\S\n]*[^\s:：][^\n:：]{0,23}[:：][^\S\n]*\S", re.MULTILINE)
_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CJK = re.compile(f"[{CJK_CHARS}]")
_LATIN_WORD = re.compile(r"[A-Za-z]{3,}")
_NAME_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


@dataclass(frozen=True, slots=True)
class Compressed:
    """The compressed request: ``text`` (≤ ~1 kB, what the models read), ``latest`` (the
    latest user turn, compressed; what the encoder reads), code-block counts, tool facts,
    ``tool_match`` (a tool's name words appear in the latest turn),
    ``turns`` (user turns), ``cjk`` (fraction 0–1 of letters that are CJK), ``mixed``
    (both CJK and Latin words present), ``chars`` (user characters before compression) and
    ``pasted`` (the latest turn carries a transcript or a long document), ``document``
    (it supplies a text to work on) and ``choices`` (it offers a label set); see the
    module docstring."""

    text: str
    latest: str
    code_blocks: int = 0
    code_lines: int = 0
    code_langs: tuple[str, ...] = ()
    has_tools: bool = False
    tool_names: tuple[str, ...] = ()
    tool_match: bool = False
    turns: int = 1
    cjk: float = 0.0
    mixed: bool = False
    chars: int = 0
    pasted: bool = False
    document: bool = False
    choices: bool = False

    @property
    def empty(self) -> bool:
        """Nothing to classify: no user text and no code."""
        return not self.text.strip()

    @property
    def key(self) -> str:
        """Cache key: BLAKE2b-128 hex of the text and every feature."""
        raw = repr((self.text, self.code_blocks, self.code_lines, self.code_langs,
                    self.has_tools, self.tool_names, self.turns, self.pasted, self.document,
                    self.choices))
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


def message_texts(request: ChatRequest) -> list[str]:
    """Every message's text, in order (the texts the router's token estimate counts:
    ``api/wire.parse_chat``); ``request.text`` as one when the body has no messages."""
    messages = request.body.get("messages") if isinstance(request.body, Mapping) else None
    if not isinstance(messages, list):
        return [request.text or ""]
    return [_content_text(m.get("content")) for m in messages if isinstance(m, Mapping)]


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
    latest = span(latest.strip(), LATEST_HEAD_CHARS, LATEST_TAIL_CHARS)
    earlier = [span(strip_code(t)[0].strip(), EARLIER_CHARS, 0)
               for t in reversed(turns[:-1][-EARLIER_TURNS:])]
    text = "\n".join([latest, *(e for e in earlier if e)])
    body = request.body if isinstance(request.body, Mapping) else {}
    names = tool_names(body)
    cjk, mixed = script_mix(text)
    pasted = is_pasted(raw[-1])
    return Compressed(text=text, latest=latest, code_blocks=blocks, code_lines=lines,
                      code_langs=langs, has_tools=bool(request.has_tools or names),
                      tool_names=names, tool_match=tool_match(names, latest),
                      turns=max(request.turns, len(turns), 1), cjk=cjk,
                      mixed=mixed, chars=sum(len(t) for t in raw), pasted=pasted,
                      document=pasted or is_document(raw[-1]),
                      choices=_CHOICES.search(latest) is not None)


def tool_match(names: Sequence[str], latest: str) -> bool:
    """True when a word (≥ ``TOOL_WORD_MIN`` letters) of one of the tool ``names`` starts a
    word of ``latest`` (the compressed latest turn), compared on its first ``TOOL_STEM``
    letters, case-insensitively. False without tools."""
    stems = {w[:TOOL_STEM].lower() for name in names for w in _NAME_PARTS.findall(name)
             if len(w) >= TOOL_WORD_MIN}
    if not stems:
        return False
    words = {w[:TOOL_STEM].lower() for w in _LATIN_WORD.findall(latest)}
    return not stems.isdisjoint(words)


def is_pasted(turn: str) -> bool:
    """True when ``turn`` (raw text) holds pasted material: more than ``PASTED_CHARS``
    characters, or a transcript of at least ``TRANSCRIPT_LINES`` ``Speaker: text`` lines
    (counted in the first ``SCAN_HEAD_CHARS``)."""
    if len(turn) > PASTED_CHARS:
        return True
    lines = _SPEAKER.finditer(turn[:SCAN_HEAD_CHARS])
    return sum(1 for _ in zip(range(TRANSCRIPT_LINES), lines)) >= TRANSCRIPT_LINES


def is_document(turn: str) -> bool:
    """True when ``turn`` (raw text) has a line of at least ``DOC_LINE_CHARS`` characters
    next to at least one other non-empty line (a passage and an instruction about it).
    ``Compressed.document`` is this or ``is_pasted``."""
    lines = [line for line in turn.splitlines() if line.strip()]
    return len(lines) >= 2 and any(len(line) >= DOC_LINE_CHARS for line in lines)


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
