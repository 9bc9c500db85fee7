"""The output filter over SSE bytes (``filter_sse``): text split over chunks at any point
is masked or blocked, other events pass, closing it closes the upstream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.policy.filter_stream import filter_sse
from llmroute.policy.normalize import Normalizer
from llmroute.policy.scan import TextScan
from llmroute.policy.wordlist import Hit, ListSpec, Matcher

BOTH = frozenset({"input", "output"})


def _matcher(action: str) -> Matcher:
    return Matcher([ListSpec("l", action, False, BOTH)], {"bad": [0], "量子武器": [0]})  # type: ignore[arg-type]


class Upstream:
    """An async iterator over SSE byte pieces that notes being closed."""

    def __init__(self, pieces: list[bytes]):
        self._it = iter(pieces)
        self.closed = False

    def __aiter__(self) -> Upstream:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._it)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self.closed = True


def chunk(text: str | None, finish: str | None = None, chat: bool = True) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {} if text is None else {"content": text}
    else:
        choice["text"] = text or ""
    obj = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
           "choices": [choice]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def run(pieces: list[str], action: str, chat: bool = True, batch: int = 1,
              ) -> tuple[str, list[Any], list[str], Upstream, list[Hit]]:
    events = [chunk(p, chat=chat) for p in pieces] + [chunk(None, "stop", chat), b"data: [DONE]\n\n"]
    up = Upstream([b"".join(events[i:i + batch]) for i in range(0, len(events), batch)])
    seen: list[Hit] = []
    scan = TextScan(_matcher(action), Normalizer(), "output")
    out = b""
    ended: list[str] = []
    gen: AsyncIterator[bytes] = filter_sse(up, scan, "chat" if chat else "completions",
                                           seen.extend, ended.append)
    async for data in gen:
        out += data
    text, finishes, raw = "", [], []
    for event in out.split(b"\n\n"):
        if not event:
            continue
        raw.append(event.decode()[6:])
        if event == b"data: [DONE]":
            continue
        c = json.loads(event[6:])["choices"][0]
        text += (c["delta"].get("content") if chat else c["text"]) or ""
        finishes.append(c["finish_reason"])
    assert ended == [text]  # the trace's answer is the text the client got
    return text, [f for f in finishes if f], raw, up, seen


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [p for p in (text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)) if p]


NOISE = st.text(st.sampled_from("xyz 量子.\u200bＸ"), max_size=30)
WORD = st.sampled_from(["bad", "BAD", "Ｂａｄ", "b\u200bad", "量子武器"])


@settings(max_examples=150, deadline=None)
@given(NOISE, NOISE, WORD, st.lists(st.integers(0, 100), max_size=10), st.integers(1, 3),
       st.booleans())
async def test_a_split_word_is_masked_in_the_stream(left, right, word, cuts, batch, chat):
    text, finishes, raw, up, seen = await run(split(left + word + right, cuts), "mask",
                                              chat, batch)
    assert text == left + "*" * len(word) + right
    assert finishes == ["stop"] and raw[-1] == "[DONE]" and len(seen) == 1 and up.closed


@settings(max_examples=150, deadline=None)
@given(NOISE, NOISE, WORD, st.lists(st.integers(0, 100), max_size=10), st.integers(1, 3),
       st.booleans())
async def test_a_split_word_ends_the_stream_with_content_filter(left, right, word, cuts,
                                                                batch, chat):
    text, finishes, raw, up, _ = await run(split(left + word + right, cuts), "block", chat,
                                           batch)
    assert text == left and finishes == ["content_filter"]
    assert raw[-1] == "[DONE]" and raw.count("[DONE]") == 1 and up.closed


async def test_events_without_text_pass_unchanged():
    role = (b'data: {"id":"x","choices":[{"index":0,"delta":{"role":"assistant",'
            b'"content":""},"finish_reason":null}]}\n\n')
    usage = b'data: {"id":"x","choices":[],"usage":{"total_tokens":3}}\n\n'
    up = Upstream([role, chunk("ba"), chunk("d!"), chunk(None, "stop"), usage,
                   b"data: [DONE]\n\n"])
    scan = TextScan(_matcher("mask"), Normalizer(), "output")
    out = b"".join([d async for d in filter_sse(up, scan, "chat", lambda hits: None,
                                                      lambda text: None)])
    assert out.startswith(role) and usage in out and out.endswith(b"data: [DONE]\n\n")
    assert b'"content":"***!"' in out


async def test_text_still_held_when_the_stream_breaks_goes_out():
    up = Upstream([chunk("all goo"), chunk("d b")])  # no finish, no [DONE]
    scan = TextScan(_matcher("mask"), Normalizer(), "output")
    out = b"".join([d async for d in filter_sse(up, scan, "chat", lambda hits: None,
                                                      lambda text: None)])
    text = "".join(json.loads(e[6:])["choices"][0]["delta"].get("content", "")
                   for e in out.split(b"\n\n") if e)
    assert text == "all good b"
