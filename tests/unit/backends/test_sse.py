"""Tests for the SSE codec (llmroute.backends.sse): spec cases, chunking invariants, encoders."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmroute.backends.sse import (
    DONE,
    SSEDecoder,
    SSEEvent,
    encode_comment,
    encode_event,
    encode_json,
)
from llmroute.errors import UpstreamProtocolError

# ---------------------------------------------------------------------------------------------
# helpers


def decode_all(chunks: list[bytes], **kw: int) -> list[SSEEvent]:
    """Feed every chunk to a fresh decoder, then close it; return all events in order."""
    decoder = SSEDecoder(**kw)
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.close()


def split_at(wire: bytes, cuts: list[int]) -> list[bytes]:
    """Split ``wire`` at the given byte offsets (any order, duplicates give empty chunks)."""
    bounds = [0, *sorted(cuts), len(wire)]
    return [wire[a:b] for a, b in zip(bounds, bounds[1:])]


def normalize(text: str) -> str:
    """CRLF and lone CR become LF: what SSE can carry in data."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def reference_decode(wire: bytes) -> list[SSEEvent]:
    """A literal, character-level reading of the WHATWG algorithm (plus close() leniency).

    Decodes the whole stream first, which is equivalent to per-line decoding because the
    line ends are ASCII; an independent oracle for the chunked byte-level implementation.
    """
    text = wire.decode("utf-8", "replace").removeprefix("\ufeff")
    lines = re.split(r"\r\n|\r|\n", text)
    if lines[-1] == "":
        lines.pop()  # the stream ended on a line end: no unterminated final line
    state = {"data": "", "event": "", "id": None, "retry": None}
    events: list[SSEEvent] = []
    for line in [*lines, ""]:  # close(): one final dispatch
        _reference_line(line, state, events)
    return events


def _reference_line(line: str, state: dict, events: list[SSEEvent]) -> None:
    """Process one line per the spec, appending a dispatched event to ``events``."""
    if line == "":
        data, state["data"] = state["data"], ""
        event, state["event"] = state["event"], ""
        if data:
            events.append(SSEEvent(data[:-1], event or "message", state["id"], state["retry"]))
    elif not line.startswith(":"):
        name, colon, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            state["data"] += value + "\n"
        elif name == "event":
            state["event"] = value
        elif name == "id" and "\0" not in value:
            state["id"] = value
        elif name == "retry" and 0 < len(value) <= 18 and all("0" <= c <= "9" for c in value):
            state["retry"] = int(value)


# a stream that exercises every line-end kind, comments, BOM, multibyte text and all fields
RICH_WIRE = (
    b"\xef\xbb\xbf: hello\r\n"
    b"retry: 1500\r\n"
    b"event: delta\r"
    b"id: 7\n"
    b"data:\xe4\xbd\xa0\xe5\xa5\xbd\xf0\x9f\x99\x82\r\n"
    b"data:  two spaces\r\n"
    b"\r\n"
    b":keep-alive\n\n"
    b"data\r\r"
    b"data: last\r"
)
RICH_EVENTS = [
    SSEEvent("你好🙂\n two spaces", "delta", "7", 1500),
    SSEEvent("", "message", "7", 1500),
    SSEEvent("last", "message", "7", 1500),
]

# ---------------------------------------------------------------------------------------------
# interpretation of single streams (one chunk)

PARSE_CASES = [
    ("simple", b"data: hi\n\n", [SSEEvent("hi")]),
    ("no-space-after-colon", b"data:hi\n\n", [SSEEvent("hi")]),
    ("only-one-space-stripped", b"data:  hi\n\n", [SSEEvent(" hi")]),
    ("trailing-space-kept", b"data: hi \n\n", [SSEEvent("hi ")]),
    ("multi-line-data", b"data: a\ndata: b\ndata:\n\n", [SSEEvent("a\nb\n")]),
    ("field-without-colon", b"data\n\n", [SSEEvent("")]),
    ("empty-data-value-dispatches", b"data:\n\n", [SSEEvent("")]),
    ("colon-in-value", b"data: {\"a\": 1}\n\n", [SSEEvent('{"a": 1}')]),
    ("comment-ignored", b": ping\n\n: pong\ndata: x\n\n", [SSEEvent("x")]),
    ("comment-only-stream", b": keep-alive\n\n" * 3, []),
    ("event-type", b"event: delta\ndata: x\n\n", [SSEEvent("x", "delta")]),
    ("event-type-reset", b"event: a\ndata: 1\n\ndata: 2\n\n",
     [SSEEvent("1", "a"), SSEEvent("2")]),
    ("empty-event-type", b"event:\ndata: x\n\n", [SSEEvent("x")]),
    ("event-without-data-discarded", b"event: a\n\ndata: x\n\n", [SSEEvent("x")]),
    ("no-data-no-dispatch", b"id: 1\n\n\n\n", []),
    ("id-persists", b"id: 1\ndata: a\n\ndata: b\n\n",
     [SSEEvent("a", id="1"), SSEEvent("b", id="1")]),
    ("empty-id-resets", b"id: 1\ndata: a\n\nid\ndata: b\n\n",
     [SSEEvent("a", id="1"), SSEEvent("b", id="")]),
    ("id-with-nul-ignored", b"id: 1\n\nid: 2\x003\ndata: a\n\n", [SSEEvent("a", id="1")]),
    ("retry-digits", b"retry: 250\ndata: a\n\n", [SSEEvent("a", retry_ms=250)]),
    ("retry-not-digits-ignored", b"retry: 25x\nretry: -1\nretry:\ndata: a\n\n", [SSEEvent("a")]),
    ("retry-unicode-digit-ignored", "retry: ²\ndata: a\n\n".encode(), [SSEEvent("a")]),
    ("retry-huge-ignored", b"retry: " + b"9" * 5000 + b"\ndata: a\n\n", [SSEEvent("a")]),
    ("retry-persists", b"retry: 5\n\ndata: a\n\n", [SSEEvent("a", retry_ms=5)]),
    ("unknown-field-ignored", b"foo: bar\nData: x\ndata: y\n\n", [SSEEvent("y")]),
    ("crlf", b"data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n", [SSEEvent("a\nb"), SSEEvent("c")]),
    ("lone-cr", b"data: a\rdata: b\r\rdata: c\r\r", [SSEEvent("a\nb"), SSEEvent("c")]),
    ("mixed-line-ends", b"data: a\rdata: b\r\n\ndata: c\n\r", [SSEEvent("a\nb"), SSEEvent("c")]),
    ("cr-cr-is-two-line-ends", b"data: a\r\r\ndata: b\n\n", [SSEEvent("a"), SSEEvent("b")]),
    ("bom-stripped", b"\xef\xbb\xbfdata: a\n\n", [SSEEvent("a")]),
    ("bom-only-once", b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n", [SSEEvent("b")]),
    ("bom-later-not-stripped", b"data: a\n\n\xef\xbb\xbfdata: b\n\n", [SSEEvent("a")]),
    ("invalid-utf8-replaced", b"data: a\xffb\xe4\xbd\n\n", [SSEEvent("a\ufffdb\ufffd")]),
    ("nul-in-data-kept", b"data: a\x00b\n\n", [SSEEvent("a\x00b")]),
    ("vertical-tab-not-a-line-end", b"data: a\x0bb\x0cc\n\n", [SSEEvent("a\x0bb\x0cc")]),
    ("unicode-line-sep-not-a-line-end", "data: a\u2028b\x85c\n\n".encode(),
     [SSEEvent("a\u2028b\x85c")]),
    ("done-sentinel", DONE, [SSEEvent("[DONE]")]),
    ("rich", RICH_WIRE, RICH_EVENTS),
]


@pytest.mark.parametrize(("wire", "expected"), [c[1:] for c in PARSE_CASES],
                         ids=[c[0] for c in PARSE_CASES])
def test_parse_one_chunk(wire: bytes, expected: list[SSEEvent]) -> None:
    assert decode_all([wire]) == expected


@pytest.mark.parametrize(("wire", "expected"), [c[1:] for c in PARSE_CASES],
                         ids=[c[0] for c in PARSE_CASES])
def test_parse_byte_by_byte(wire: bytes, expected: list[SSEEvent]) -> None:
    assert decode_all([wire[i:i + 1] for i in range(len(wire))]) == expected


@pytest.mark.parametrize(("wire", "expected"), [c[1:] for c in PARSE_CASES],
                         ids=[c[0] for c in PARSE_CASES])
def test_reference_agrees_with_table(wire: bytes, expected: list[SSEEvent]) -> None:
    """Guards the oracle used by the property test below."""
    assert reference_decode(wire) == expected


# ---------------------------------------------------------------------------------------------
# chunk boundaries

BOUNDARY_STREAMS = [
    ("rich", RICH_WIRE, RICH_EVENTS),
    ("multibyte", "data: 你好🙂\n\n".encode(), [SSEEvent("你好🙂")]),
    ("multibyte-crlf-multiline", "data: 你好\r\ndata: 🙂🙂\r\n\r\n".encode(),
     [SSEEvent("你好\n🙂🙂")]),
    ("bom", b"\xef\xbb\xbfdata: a\n\n", [SSEEvent("a")]),
    ("cr-only", b"data: a\r\rdata: b\r\r", [SSEEvent("a"), SSEEvent("b")]),
]


@pytest.mark.parametrize(("wire", "expected"), [c[1:] for c in BOUNDARY_STREAMS],
                         ids=[c[0] for c in BOUNDARY_STREAMS])
def test_split_at_every_offset(wire: bytes, expected: list[SSEEvent]) -> None:
    for cut in range(len(wire) + 1):
        assert decode_all([wire[:cut], wire[cut:]]) == expected, f"cut at byte {cut}"


@pytest.mark.parametrize(("wire", "expected"), [c[1:] for c in BOUNDARY_STREAMS],
                         ids=[c[0] for c in BOUNDARY_STREAMS])
def test_split_at_every_pair_of_offsets(wire: bytes, expected: list[SSEEvent]) -> None:
    for a in range(len(wire) + 1):
        for b in range(a, len(wire) + 1):
            assert decode_all([wire[:a], wire[a:b], wire[b:]]) == expected, f"cuts {a}, {b}"


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"data: a\r", b"\ndata: b\r\n\r\n"], [SSEEvent("a\nb")]),
        ([b"data: a\r", b"", b"\n", b"data: b\r", b"\n\r", b"\n"], [SSEEvent("a\nb")]),
        ([b"data: a\r", b"\r"], [SSEEvent("a")]),
        ([b"data: a\r", b"\r", b"\ndata: b\n\n"], [SSEEvent("a"), SSEEvent("b")]),
    ],
    ids=["crlf-split", "crlf-split-with-empty-chunks", "cr-then-cr", "cr-then-crlf"],
)
def test_cr_lf_across_chunks(chunks: list[bytes], expected: list[SSEEvent]) -> None:
    assert decode_all(chunks) == expected


def test_feed_returns_events_as_soon_as_completed() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"\ndata: b") == [SSEEvent("a")]
    assert decoder.feed(b"\r") == []  # ends the line "data: b"; may still become CRLF …
    assert decoder.feed(b"\n") == []  # … and did: that LF is not a second line end
    assert decoder.feed(b"\n") == [SSEEvent("b")]
    assert decoder.close() == []


# arbitrary streams built from the tokens that matter to the parser
WIRE_TOKENS = st.sampled_from([
    b"data", b"event", b"id", b"retry", b":", b" ", b"\r", b"\n", b"\r\n", b"x", b"7",
    b"\x00", b"\xff", b"\xe4\xbd\xa0", b"\xf0\x9f\x99\x82", b"\xef\xbb\xbf",
])
WIRES = st.lists(WIRE_TOKENS, max_size=60).map(b"".join)


@given(wire=WIRES, data=st.data())
def test_any_split_matches_the_spec_reference(wire: bytes, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=8))
    assert decode_all(split_at(wire, cuts)) == reference_decode(wire)


# ---------------------------------------------------------------------------------------------
# encode → decode round trips

FIELD_TEXT = st.text().filter(lambda s: "\r" not in s and "\n" not in s)


@given(data=st.text(), event=st.none() | FIELD_TEXT,
       id=st.none() | FIELD_TEXT.filter(lambda s: "\0" not in s))
def test_round_trip(data: str, event: str | None, id: str | None) -> None:
    expected = SSEEvent(normalize(data), event or "message", id)
    assert decode_all([encode_event(data, event=event, id=id)]) == [expected]


@given(st.text(alphabet=st.sampled_from("\r\n \u2028你🙂")))
def test_round_trip_line_break_heavy(data: str) -> None:
    assert decode_all([encode_event(data)]) == [SSEEvent(normalize(data))]


@given(datas=st.lists(st.text(), min_size=1, max_size=5), data=st.data())
def test_round_trip_many_events_any_split(datas: list[str], data: st.DataObject) -> None:
    wire = b"".join(encode_event(d) + encode_comment("ping") for d in datas) + DONE
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=10))
    expected = [SSEEvent(normalize(d)) for d in datas] + [SSEEvent("[DONE]")]
    assert decode_all(split_at(wire, cuts)) == expected


@pytest.mark.parametrize("data", ["", "\n", "\r\n", "\r", "\n\n", " ", ":", "data: x\n\n"],
                         ids=["empty", "lf", "crlf", "cr", "two-lf", "space", "colon", "nested"])
def test_round_trip_edge_data(data: str) -> None:
    assert decode_all([encode_event(data)]) == [SSEEvent(normalize(data))]


# ---------------------------------------------------------------------------------------------
# encoders

@pytest.mark.parametrize(
    ("kwargs", "wire"),
    [
        ({"data": "hi"}, b"data: hi\n\n"),
        ({"data": ""}, b"data: \n\n"),
        ({"data": "a\nb"}, b"data: a\ndata: b\n\n"),
        ({"data": "a\r\nb\rc\n"}, b"data: a\ndata: b\ndata: c\ndata: \n\n"),
        ({"data": " x"}, b"data:  x\n\n"),
        ({"data": "x", "event": "delta", "id": "9"}, b"event: delta\nid: 9\ndata: x\n\n"),
        ({"data": "x", "id": ""}, b"id: \ndata: x\n\n"),
        ({"data": "你好🙂"}, "data: 你好🙂\n\n".encode()),
    ],
    ids=["simple", "empty", "multi-line", "cr-crlf-trailing", "leading-space", "event-id",
         "empty-id", "multibyte"],
)
def test_encode_event_wire_form(kwargs: dict, wire: bytes) -> None:
    assert encode_event(**kwargs) == wire


@pytest.mark.parametrize(
    "kwargs",
    [{"event": "a\nb"}, {"event": "a\r"}, {"id": "1\n"}, {"id": "\r1"}, {"id": "1\x002"}],
    ids=["event-lf", "event-cr", "id-lf", "id-cr", "id-nul"],
)
def test_encode_event_rejects_unframeable_fields(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        encode_event("x", **kwargs)


@pytest.mark.parametrize(
    ("text", "wire"),
    [("ping", b": ping\n\n"), ("", b": \n\n"), ("a\nb\r\nc", b": a\n: b\n: c\n\n")],
    ids=["keep-alive", "empty", "multi-line"],
)
def test_encode_comment(text: str, wire: bytes) -> None:
    assert encode_comment(text) == wire
    assert decode_all([wire + encode_event("after")]) == [SSEEvent("after")]


@given(st.text())
def test_comments_never_produce_events(text: str) -> None:
    assert decode_all([encode_comment(text)]) == []


def test_done_constant() -> None:
    assert DONE == b"data: [DONE]\n\n"


# ---------------------------------------------------------------------------------------------
# realistic engine streams and end of stream

def _chunk(content: str | None, finish: str | None = None) -> dict:
    delta = {} if content is None else {"content": content}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "qwen2.5-0.5b", "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


OPENAI_CHUNKS = [_chunk(""), _chunk("你"), _chunk("好"), _chunk("🙂 ok"), _chunk(None, "stop")]


def _engine_wire(line_end: bytes) -> bytes:
    """An OpenAI chat stream as engines send it, without the final ``data: [DONE]``."""
    events = [b"data: " + json.dumps(c, ensure_ascii=False).encode() + line_end * 2
              for c in OPENAI_CHUNKS]
    return b": keep-alive" + line_end * 2 + b"".join(events)


@pytest.mark.parametrize("size", [1, 3, 7, 64, 100_000], ids=lambda n: f"chunks-of-{n}")
@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"], ids=["vllm-lf", "llamacpp-crlf"])
def test_engine_stream_without_done(line_end: bytes, size: int) -> None:
    wire = _engine_wire(line_end)
    decoder = SSEDecoder()
    events = [e for i in range(0, len(wire), size) for e in decoder.feed(wire[i:i + size])]
    assert [json.loads(e.data) for e in events] == OPENAI_CHUNKS
    assert decoder.close() == []


@pytest.mark.parametrize(
    ("tail", "closed"),
    [
        (b'data: {"choi', [SSEEvent('{"choi')]),
        (b'data: {"choices": []}\n', [SSEEvent('{"choices": []}')]),
        (b"data: {\"choi\r", [SSEEvent('{"choi')]),
        (b"data: a\ndata: {\"b", [SSEEvent('a\n{"b')]),
        (b": keep-al", []),
        (b"event: x", []),
        (b"", []),
    ],
    ids=["mid-line", "line-but-no-blank-line", "ends-in-cr", "multi-line-mid-line",
         "mid-comment", "no-data", "clean-end"],
)
def test_close_returns_truncated_final_event(tail: bytes, closed: list[SSEEvent]) -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"id": 1}\n\n' + tail) == [SSEEvent('{"id": 1}')]
    assert decoder.close() == closed
    assert decoder.close() == []


def test_truncated_final_event_fails_json_parse() -> None:
    wire = _engine_wire(b"\n")[:-30]
    events = decode_all([wire])
    assert [json.loads(e.data) for e in events[:-1]] == OPENAI_CHUNKS[:-1]
    with pytest.raises(json.JSONDecodeError):
        json.loads(events[-1].data)


# ---------------------------------------------------------------------------------------------
# the partial-line guard

@pytest.mark.parametrize(
    "chunks",
    [[b"data: " + b"x" * 11], [b"data: x\n\n", b"data: ", b"x" * 11], [b"x" * 5] * 4],
    ids=["one-chunk", "after-events", "many-small-chunks"],
)
def test_max_line_bytes_exceeded(chunks: list[bytes]) -> None:
    decoder = SSEDecoder(max_line_bytes=16)
    with pytest.raises(UpstreamProtocolError, match="16 bytes"):
        for chunk in chunks:
            decoder.feed(chunk)


def test_max_line_bytes_is_per_line() -> None:
    decoder = SSEDecoder(max_line_bytes=16)
    line = b"data: " + b"x" * 10  # exactly 16 bytes
    events = [e for _ in range(5) for e in decoder.feed(line) + decoder.feed(b"\n\n")]
    assert events == [SSEEvent("x" * 10)] * 5


def test_max_line_bytes_default_is_4_mib() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: " + b"x" * (4 * 1024 * 1024 - 6)) == []
    with pytest.raises(UpstreamProtocolError):
        decoder.feed(b"x")


def test_max_line_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        SSEDecoder(max_line_bytes=0)


@given(st.dictionaries(st.text(), st.text() | st.integers(-(2**63), 2**63 - 1) | st.none(),
                       max_size=5))
def test_encode_json_is_one_event_carrying_the_object(obj):
    import json

    events = SSEDecoder().feed(encode_json(obj))
    assert len(events) == 1 and json.loads(events[0].data) == obj
