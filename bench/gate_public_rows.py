"""Write the gate's utterance rows drawn from permissively licensed public sets.

Rewrites ``src/llmroute/gate/data/utterances.jsonl``: the rows written for llmroute (no
``source``) stay as they are, in order; every row with a ``source`` is replaced by a fresh,
deterministic selection (the same every run), each tagged with its ``source`` so that
``bench/gate_quality.py`` can score that source leave-one-source-out.

Only the sets in ``gate_quality.TRAINABLE`` (Apache-2.0 / MIT, see each SOURCE.md) are read.
Per source and intent the rows are capped (``QUOTAS``) so that they add to, rather than
swamp, our own ~200 utterances per intent:

- MT-Bench: the first turn of every question (10 per category), labelled as the benchmark
  maps the categories;
- GSM8K: the train split (the benchmark scores the test split), every 60th question → math;
- MT-Bench-101: dialogues the benchmark does not score (``[1::3]``) up to their last user
  turn; maths (MR) → math, general reasoning (GR) → reasoning, the other tasks → chat;
- QMSum: the last specific query of each meeting with its transcript → summarization,
  stored as the gate reads it (``compress(...).text``), not the whole transcript.

BFCL and Glaive are not used: their requests are tool calls only because of the tool
schemas sent with them; their text alone ("find the area of a triangle …") labelled
tool_call would pull plain maths and factual questions sent without tools to tool_call.

    python bench/gate_public_rows.py [--smoke]

``--smoke`` writes the same rows to a temporary file instead (the shipped file is left
alone); ``--quick`` is the full run (it takes seconds).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gate_quality import DATA, MT_BENCH, MT_BENCH_101, SHIPPED, jsonl

from llmroute.gate.compress import compress, prompt_request

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from modes import mode, parser, skip  # noqa: E402

QUOTAS = {("gsm8k", "math"): 30, ("mt-bench-101", "chat"): 30,
          ("mt-bench-101", "math"): 15, ("mt-bench-101", "reasoning"): 15,
          ("qmsum", "summarization"): 30}
"""Rows per (source, intent); MT-Bench gives all 80 of its questions."""

Row = dict[str, Any]


def mt_bench_rows() -> Iterator[Row]:
    """First turns of every MT-Bench question."""
    for r in jsonl(DATA / "mt-bench" / "question.jsonl"):
        yield {"text": r["turns"][0], "intent": MT_BENCH[r["category"]]}


def gsm8k_rows() -> Iterator[Row]:
    """Every 60th GSM8K train question → math."""
    rows = list(jsonl(DATA / "gsm8k" / "train.every4th.jsonl"))[::60]
    yield from ({"text": r["question"], "intent": "math"} for r in rows)


def mt_bench_101_rows() -> Iterator[Row]:
    """Dialogues up to their last user turn, the benchmark's labels."""
    for r in list(jsonl(DATA / "mt-bench-101" / "mtbench101.jsonl"))[1::3]:
        msgs = [m for t in r["history"] for m in ({"role": "user", "content": t["user"]},
                                                 {"role": "assistant", "content": t["bot"]})]
        yield {"messages": msgs[:-1], "intent": MT_BENCH_101.get(r["task"], "chat")}


def qmsum_rows() -> Iterator[Row]:
    """The last specific query of each meeting, with its transcript, as the gate reads it."""
    for r in jsonl(DATA / "qmsum" / "test.jsonl"):
        transcript = "\n".join(f"{t['speaker']}: {t['content']}" for t in r["meeting_transcripts"])
        query = r["specific_query_list"][-1]["query"]
        text = compress(prompt_request(f"{transcript}\n\n{query}")).text
        yield {"text": text, "intent": "summarization"}


SOURCES = {"mt-bench": mt_bench_rows, "gsm8k": gsm8k_rows, "qmsum": qmsum_rows}


def capped(source: str, rows: Iterator[Row]) -> Iterator[Row]:
    """``rows`` tagged with ``source``, at most ``QUOTAS[(source, intent)]`` per intent."""
    taken: dict[str, int] = {}
    for row in rows:
        cap = QUOTAS.get((source, row["intent"]))
        if cap is not None and taken.get(row["intent"], 0) >= cap:
            continue
        taken[row["intent"]] = taken.get(row["intent"], 0) + 1
        yield {**row, "lang": "en", "source": source}


def main(argv: list[str] | None = None) -> int:
    """Rewrite the shipped utterances file (``--smoke``: a temporary copy); returns 0."""
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    if not DATA.is_dir():
        skip(f"no data at {DATA}")
    own = [r for r in jsonl(SHIPPED) if r.get("source") is None]
    public = [r for name, rows in SOURCES.items() for r in capped(name, rows())]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / SHIPPED.name if mode(args) == "smoke" else SHIPPED
        with out.open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in [*own, *public])
    counts: dict[tuple[str, str], int] = {}
    for r in public:
        counts[r["source"], r["intent"]] = counts.get((r["source"], r["intent"]), 0) + 1
    for (source, intent), n in sorted(counts.items()):
        print(f"{source:<14} {intent:<18} {n}")
    print(f"{len(own)} own rows kept, {len(public)} public rows written")
    per_source: dict[str, int] = {}
    for (source, _), n in counts.items():
        per_source[source] = per_source.get(source, 0) + n
    print("RESULT " + json.dumps({"own_rows": len(own), "public_rows": len(public),
                                  "per_source": per_source}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
