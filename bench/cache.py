"""The answer cache: false hits and recall on human-labelled paraphrase pairs, number and
name swaps, hit rate on real repeat traffic, and speed through the real server.

* **PAWS-X** (``../shared/data/paraphrase-pairs``; English and Chinese; nearly every
  negative is the same words in another order): prompt ``a`` is stored, ``b`` asked, through
  the real ``AnswerCache`` with the gate's verdicts and its encoder's vectors. Side by side,
  a similarity-only cache (the peers' design: the same encoder, a threshold alone) whose
  threshold is set on dev to the guarded cache's dev recall. The defaults were calibrated on
  dev (``--calibrate`` prints the grid); the keys are on test.
* **Swaps**: GSM8K test questions, MT-Bench and MT-Bench-101 user turns, each stored, then
  asked with one number changed (×10 or +1) or one mid-sentence name replaced
  (``swap_false_hit_rate``: served share), and asked framed in a template that keeps every
  word (``rephrase_hit_rate``): the rephrasings are checked to keep the anchors (numbers,
  names, code, quotes) by construction — the question's own text is inside them, unchanged.
* **Repeat traffic**: every MT-Bench-101 user turn (in file order) and the Alpaca demo
  instructions, replayed once as they are, one tenant: the hits come only from the repeats
  and near-repeats the sets contain (no repeats are added).
* **Speed**: ``llmroute serve`` (cache on, the semantic gate) in front of
  ``bench/lib/upstream.py``: the p50 of a served hit (client round trip on loopback, beside a
  miss's round trip in the same run; the lookup's and the gate's own times from
  ``server-timing``) and the lookup's added time on a miss (``server-timing: cache;dur``).
  Beside them the same run's floor: a ``GET /v1/models`` round trip after each hit (same
  client, same server; no gate, no lookup), ``http_floor_p50_ms`` — what any answer from
  this server costs on this machine before the cache does anything.

``--quick``: samples (300 pairs per language and split, 300 questions, 200 repeats, 100
timed requests); ``--smoke``: a few of each, to check every path runs. Last line:
``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.cache_pairs import (  # noqa: E402
    DATA, Judged, judge, paws, questions, rates, rephrased, swapped,
    threshold_for_recall, verdicts,
)
from lib.procs import free_port  # noqa: E402

from llmroute.config import GateConfig  # noqa: E402
from llmroute.config.cache import CacheConfig  # noqa: E402
from llmroute.gate.semantic import SemanticGate  # noqa: E402

GRID = {"threshold": (0.8, 0.9, 0.93), "max_changed": (0.08, 0.12, 0.16, 0.2),
        "min_block": (0, 2, 3, 4)}


async def quality(gate: SemanticGate, sizes: dict[str, int | None], rng: random.Random,
                  calibrate: bool) -> dict[str, float]:
    """The PAWS-X keys (module docstring)."""
    cfg, out = CacheConfig(enabled=True), {}
    guarded: dict[str, list[Judged]] = {}
    for lang in ("en", "zh"):
        split = {s: paws(lang, s, sizes["pairs"], rng) for s in ("dev", "test")}
        texts = sorted({t for s in split.values() for a, b, _ in s for t in (a, b)})
        intents = dict(zip(texts, await verdicts(gate, texts), strict=True))
        dev = await judge(cfg, split["dev"], intents)
        test = await judge(cfg, split["test"], intents)
        guarded[lang + "-dev"], guarded[lang + "-test"] = dev, test
        if calibrate:
            await _grid(lang, split["dev"], intents)
        fhr, rec = rates(test)
        out[f"false_hit_rate_{lang}"], out[f"recall_{lang}"] = round(fhr, 4), round(rec, 4)
        out[f"dev_false_hit_rate_{lang}"], out[f"dev_recall_{lang}"] = map(
            lambda v: round(v, 4), rates(dev))
        print(f"{lang}: test false hits {fhr:.4f}, recall {rec:.4f}; refusals "
              f"{_reasons(test)}")
    dev = guarded["en-dev"] + guarded["zh-dev"]
    test = guarded["en-test"] + guarded["zh-test"]
    t = threshold_for_recall(dev, rates(dev)[1])
    plain_fhr, plain_rec = rates(test, t)
    fhr, rec = rates(test)
    out.update(similarity_only_threshold=round(t, 4),
               similarity_only_false_hit_rate=round(plain_fhr, 4),
               similarity_only_recall=round(plain_rec, 4),
               false_hit_ratio_vs_similarity_only=round(fhr / plain_fhr, 4)
               if plain_fhr else None)
    print(f"similarity only at {t:.4f} (dev recall matched): test false hits "
          f"{plain_fhr:.4f}, recall {plain_rec:.4f}; guarded {fhr:.4f} / {rec:.4f}")
    return out


async def _grid(lang: str, dev: list[tuple[str, str, int]], intents: dict) -> None:
    for th in GRID["threshold"]:
        for ch in GRID["max_changed"]:
            for mb in GRID["min_block"]:
                cfg = CacheConfig(enabled=True, threshold=th, max_changed=ch, min_block=mb)
                fhr, rec = rates(await judge(cfg, dev, intents))
                print(f"  calibrate {lang} dev threshold={th} max_changed={ch} "
                      f"min_block={mb}: false hits {fhr:.4f} recall {rec:.4f}")


def _reasons(judged: list[Judged]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for j in judged:
        if not j.served:
            counts[j.reason] = counts.get(j.reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


async def swaps(gate: SemanticGate, n: int, rng: random.Random) -> dict[str, float]:
    """The swap keys (module docstring)."""
    asked = questions(n, rng)
    swap = [(q, s, 0) for q in asked if (s := swapped(q, rng)) is not None]
    same = [(q, rephrased(q, rng), 1) for q in asked]
    texts = sorted({t for a, b, _ in swap + same for t in (a, b)})
    intents = dict(zip(texts, await verdicts(gate, texts), strict=True))
    cfg = CacheConfig(enabled=True)
    judged_swaps = await judge(cfg, swap, intents)
    judged_same = await judge(cfg, same, intents)
    false_hits = sum(j.served for j in judged_swaps)
    print(f"swaps: {false_hits} of {len(swap)} served (refusals {_reasons(judged_swaps)}); "
          f"rephrasings served {sum(j.served for j in judged_same)} of {len(same)}")
    return {"swap_false_hit_rate": round(false_hits / max(len(swap), 1), 5),
            "swap_pairs": len(swap),
            "rephrase_hit_rate": round(rates(judged_same)[1], 4)}


async def repeats(gate: SemanticGate, n: int | None) -> dict[str, float]:
    """The repeat-traffic key (module docstring)."""
    stream = [h["user"] for line in (DATA / "mt-bench-101" / "mtbench101.jsonl").open()
              for h in json.loads(line)["history"]]
    stream += [r["instruction"] + ("\n" + r["input"] if r.get("input") else "")
               for r in json.load((DATA / "alpaca-demo" / "alpaca_en_demo.json").open())]
    stream = stream[:n] if n else stream
    intents = dict(zip(sorted(set(stream)), await verdicts(gate, sorted(set(stream))),
                       strict=True))
    from llmroute.cache.answers import AnswerCache, Scope
    from lib.cache_pairs import ANSWER, request

    async def none(_: object) -> None:
        return None
    cache = AnswerCache(CacheConfig(enabled=True), none, lambda: 0.0)
    scope, hits = Scope("", "", "traffic"), {"hit-exact": 0, "hit-semantic": 0}
    for i, text in enumerate(stream):
        found = await cache.lookup(request(text, f"t{i}"), intents[text], scope, {})
        if found.entry is not None:
            hits[found.result] += 1
        else:
            cache.store(found, request(text, f"t{i}"), intents[text], scope, ANSWER)
    rate = sum(hits.values()) / max(len(stream), 1)
    print(f"repeat traffic: {len(stream)} requests, {hits} → hit rate {rate:.4f}")
    return {"hit_rate_repeat_traffic": round(rate, 4), "repeat_requests": len(stream),
            "repeat_hits_semantic": hits["hit-semantic"]}


def speed(n: int, rng: random.Random) -> dict[str, float]:
    """The speed keys, through ``llmroute serve`` (module docstring)."""
    up_port, port = free_port(), free_port()
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "router.yaml"
        config.write_text(yaml.safe_dump({
            "server": {"drain_delay_s": 0.0, "drain_timeout_s": 2},
            "pools": {"p": {}}, "routing": {"default_pool": "p"},
            "backends": [{"id": "b", "pool": "p", "engine": "openai", "model": "m",
                          "base_url": f"http://127.0.0.1:{up_port}"}],
            "responses": {"path": ":memory:"}, "cache": {"enabled": True}}))
        env = {**os.environ, "PYTHONPATH": str(here.parent / "src")}
        procs = [subprocess.Popen([sys.executable, str(here / "lib" / "upstream.py"),
                                   str(up_port), "4", "0"], env=env),
                 subprocess.Popen([sys.executable, "-m", "llmroute.cli.main", "serve",
                                   "--config", str(config), "--port", str(port),
                                   "--log-level", "warning"], env=env)]
        try:
            return _timed(f"http://127.0.0.1:{port}", n, rng)
        finally:
            for p in procs:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()


def _timed(url: str, n: int, rng: random.Random) -> dict[str, float]:
    with httpx.Client(base_url=url, timeout=60) as http:
        _ready(http)
        asked = questions(n + 1, rng)
        miss_ms, hit_ms, hit_server_ms, miss_trip, hit_gate, floor = [], [], [], [], [], []
        for i, text in enumerate(asked):
            body = {"model": "auto", "messages": [{"role": "user", "content": text}]}
            t0 = time.perf_counter()
            first = http.post("/v1/chat/completions", json=body)
            miss_trip.append((time.perf_counter() - t0) * 1000)
            miss_ms.append(_cache_dur(first))
            t0 = time.perf_counter()
            again = http.post("/v1/chat/completions", json=body)
            elapsed = (time.perf_counter() - t0) * 1000
            if i and again.headers.get("x-llmroute-cache") == "hit-exact":
                hit_ms.append(elapsed)
                hit_server_ms.append(_cache_dur(again))
                hit_gate.append(_cache_dur(again, "gate"))
                t0 = time.perf_counter()
                http.get("/v1/models")
                floor.append((time.perf_counter() - t0) * 1000)
        metrics = http.get("/metrics").text
    embeds = next((float(line.split()[-1]) for line in metrics.splitlines()
                   if line.startswith("llmroute_cache_embeds_total")), 0.0)
    out = {"hit_p50_ms": round(statistics.median(hit_ms), 3) if hit_ms else None,
           "hit_lookup_p50_ms": round(statistics.median(hit_server_ms), 3) if hit_ms else None,
           "miss_added_p50_ms": round(statistics.median(miss_ms), 3),
           "miss_round_trip_p50_ms": round(statistics.median(miss_trip), 3),
           "hit_gate_p50_ms": round(statistics.median(hit_gate), 3) if hit_gate else None,
           "http_floor_p50_ms": round(statistics.median(floor), 3) if floor else None,
           "miss_lookups_that_embedded": embeds / max(len(asked), 1)}
    print(f"speed: {len(hit_ms)} hits, {len(miss_ms)} misses: {out}")
    return out


def _ready(http: httpx.Client, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if http.get("/health").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("llmroute serve did not start")


def _cache_dur(answer: httpx.Response, step: str = "cache") -> float:
    """The ``<step>;dur=`` of the answer's ``server-timing`` (ms)."""
    for part in answer.headers.get("server-timing", "").split(","):
        name, _, dur = part.strip().partition(";dur=")
        if name == step:
            return float(dur)
    raise RuntimeError(f"no cache timing in {answer.headers.get('server-timing')!r}")


async def run(args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(38)
    sizes = ({"pairs": 20, "questions": 20, "repeats": 40, "timed": 5} if args.smoke else
             {"pairs": 300, "questions": 300, "repeats": 400, "timed": 100} if args.quick
             else {"pairs": None, "questions": 2000, "repeats": None, "timed": 400})
    gate = SemanticGate(GateConfig())
    await gate.start()
    try:
        out = await quality(gate, sizes, rng, args.calibrate)
        out.update(await swaps(gate, sizes["questions"], rng))
        out.update(await repeats(gate, sizes["repeats"]))
    finally:
        await gate.close()
    out.update(speed(sizes["timed"], rng))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="samples: under 3 minutes")
    p.add_argument("--smoke", action="store_true", help="a few of each: every path runs")
    p.add_argument("--calibrate", action="store_true", help="print the dev grid")
    args = p.parse_args(argv)
    if not (DATA / "paraphrase-pairs").is_dir():
        print("RESULT " + json.dumps({"skipped": "no ../shared/data"}))
        return 0
    out = asyncio.run(run(args))
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
