"""What the sensitive-word filter costs: streamed output scanned per second with a
10,000-entry list (``filter_mb_per_s``), the request-side check, and compiling the list.

    python bench/filter.py [--quick | --smoke]

The stream is what the relay hands the client: one OpenAI chat chunk event per token-sized
piece of text (4 characters on average), run through ``filter_sse`` exactly as
``flow/stages.OutputFilter`` wraps it, against the same events passed through untouched (the
baseline). Text is English-like words (ASCII) and, separately, a mix with Chinese, so the
non-ASCII normalisation path is priced too; the list mixes English words, phrases and
Chinese entries, and the text holds a list entry every ~2 kB (masked). Figures are medians
over rounds; MB = 10^6 bytes of answer text (UTF-8).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson

from llmroute.config.filter import WordListConfig
from llmroute.policy.filter_stream import filter_sse
from llmroute.policy.normalize import Normalizer
from llmroute.policy.scan import TextScan, scan_text
from llmroute.policy.wordlist import Matcher, compile_lists

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from modes import mode, parser, pick  # noqa: E402

LETTERS = "abcdefghijklmnopqrstuvwxyz"
HANZI = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也"


def words(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct list entries: 70% English words (5–12 letters), 20% two-word
    phrases, 10% Chinese (2–4 characters)."""
    out: set[str] = set()
    while len(out) < n:
        r = rng.random()
        if r < 0.7:
            out.add("".join(rng.choices(LETTERS, k=rng.randint(5, 12))))
        elif r < 0.9:
            out.add(" ".join("".join(rng.choices(LETTERS, k=rng.randint(3, 7)))
                             for _ in range(2)))
        else:
            out.add("".join(rng.choices(HANZI, k=rng.randint(2, 4))))
    return sorted(out)


def answer_text(rng: random.Random, size: int, entries: list[str], cjk: bool) -> str:
    """About ``size`` characters of text with a list entry every ~2,000 characters."""
    parts, total = [], 0
    while total < size:
        if rng.random() < 0.004:
            w = rng.choice(entries)
        elif cjk and rng.random() < 0.3:
            w = "".join(rng.choices(HANZI, k=rng.randint(1, 3)))
        else:
            w = "".join(rng.choices("etaoinshrdlu", k=rng.randint(1, 7)))
        parts.append(w)
        total += len(w) + 1
    return " ".join(parts)


def events(text: str) -> list[bytes]:
    """The relay's chunk events for ``text``, 4 characters a chunk, then the finish."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "m"}
    out = [b"data: " + orjson.dumps({**base, "choices": [{"index": 0, "delta": {
        "content": text[i:i + 4]}, "finish_reason": None}]}) + b"\n\n"
           for i in range(0, len(text), 4)]
    out.append(b"data: " + orjson.dumps({**base, "choices": [{"index": 0, "delta": {},
                                                               "finish_reason": "stop"}]})
               + b"\n\n")
    return [*out, b"data: [DONE]\n\n"]


class Replay:
    """An async iterator over prepared events (the relay's side)."""

    def __init__(self, items: list[bytes]):
        self._it = iter(items)

    def __aiter__(self) -> Replay:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._it)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        return None


async def stream_seconds(matcher: Matcher | None, items: list[bytes]) -> float:
    """Seconds to drain ``items`` through the filter (None: passed through)."""
    t0 = time.perf_counter()
    src: AsyncIterator[bytes] = Replay(items)
    if matcher is not None:
        src = filter_sse(src, TextScan(matcher, Normalizer(), "output"), "chat",
                         lambda hits: None, lambda text: None)
    async for _ in src:
        pass
    return time.perf_counter() - t0


async def stream_figures(matcher: Matcher, text: str, rounds: int) -> dict[str, float]:
    items = events(text)
    mb = len(text.encode("utf-8")) / 1e6
    base = statistics.median([await stream_seconds(None, items) for _ in range(rounds)])
    filt = statistics.median([await stream_seconds(matcher, items) for _ in range(rounds)])
    return {"mb": round(mb, 3), "mb_per_s": round(mb / filt, 2),
            "us_per_chunk": round(filt / len(items) * 1e6, 3),
            "added_us_per_chunk": round((filt - base) / len(items) * 1e6, 3)}


def check_us(matcher: Matcher, prompt: str, n: int) -> float:
    """Mean µs of the request-side scan of ``prompt``."""
    norm = Normalizer()
    t0 = time.perf_counter()
    for _ in range(n):
        scan_text(matcher, norm, prompt, "input")
    return (time.perf_counter() - t0) / n * 1e6


async def run(size: str) -> dict[str, object]:
    """Every figure at run size ``size`` (``modes.MODES``)."""
    rng = random.Random(7)
    entries = words(rng, 10_000)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "words.txt"
        path.write_text("\n".join(entries) + "\n", encoding="utf-8")
        cfg = [WordListConfig(name="bench", path=str(path), action="mask")]
        t0 = time.perf_counter()
        matcher = compile_lists(cfg, [path], 64, Normalizer())
        compile_ms = (time.perf_counter() - t0) * 1000
    chars, rounds = pick(size, (2_000_000, 5), (400_000, 3), (20_000, 1))
    ascii_ = await stream_figures(matcher, answer_text(rng, chars, entries, False), rounds)
    cjk = await stream_figures(matcher, answer_text(rng, chars // 2, entries, True), rounds)
    prompt = answer_text(rng, 1000, entries, False)
    return {"words": len(entries), "compile_ms": round(compile_ms, 1),
            "ascii": ascii_, "cjk_mix": cjk,
            "check_us_1kb_prompt": round(check_us(matcher, prompt, pick(size, 10000, 2000, 50)), 2)}


def main() -> int:
    args = parser(__doc__).parse_args()
    res = asyncio.run(run(mode(args)))
    print(f"{res['words']} entries compiled in {res['compile_ms']} ms")
    print(f"{'stream':<10}{'MB':>8}{'MB/s':>10}{'µs/chunk':>10}{'added µs':>10}")
    for name in ("ascii", "cjk_mix"):
        f = res[name]
        assert isinstance(f, dict)
        print(f"{name:<10}{f['mb']:>8}{f['mb_per_s']:>10}{f['us_per_chunk']:>10}"
              f"{f['added_us_per_chunk']:>10}")
    print(f"request check, 1 kB prompt: {res['check_us_1kb_prompt']} µs")
    ascii_, cjk = res["ascii"], res["cjk_mix"]
    assert isinstance(ascii_, dict) and isinstance(cjk, dict)
    print("RESULT " + json.dumps({
        "filter_mb_per_s": ascii_["mb_per_s"], "filter_mb_per_s_cjk": cjk["mb_per_s"],
        "filter_added_us_per_chunk": ascii_["added_us_per_chunk"],
        "filter_check_us_1kb_prompt": res["check_us_1kb_prompt"],
        "filter_compile_ms_10k": res["compile_ms"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
