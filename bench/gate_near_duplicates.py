"""Near-duplicates between the gate's fitted utterances and every evaluation prompt.

An utterance that nearly repeats a prompt the gate is scored on inflates that score. This
compares what the gate reads of each (``compress(...).text``, NFKC) by the Jaccard overlap
of character 3-gram sets, and lists each pair at or above ``--threshold`` (default 0.6).
Evaluation prompts: every source of ``bench/gate_quality.py`` (``--per-source`` prompts
each, as there) and our own test and development files. Utterance rows with a ``source``
come from that public set by design (leave-one-source-out scores them) and are skipped.

    python bench/gate_near_duplicates.py [--quick | --smoke] [--utterances FILE] [--threshold 0.6]

``--quick`` compares 60 prompts per source, ``--smoke`` 2 (default 300).

Last line: ``RESULT {"pairs": N, "utterances": N, "prompts": N, "threshold": x}``.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from collections import defaultdict
from pathlib import Path

from gate_quality import (DATA, EN_DEV, EN_TEST, SHIPPED, SOURCES, ZH_DEV, ZH_HELDOUT, ZH_TEST,
                          jsonl)

from llmroute.gate.compress import compress, compress_text
from llmroute.gate.examples import read_labelled

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from modes import mode, parser, pick, skip  # noqa: E402

EN_HELDOUT = ZH_HELDOUT.with_name("gate_en_heldout.jsonl")


def grams(text: str) -> frozenset[str]:
    """Character 3-grams of the NFKC, lower-cased, whitespace-collapsed text."""
    t = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    return frozenset(t[i:i + 3] for i in range(max(len(t) - 2, 1)))


def evaluation_prompts(per_source: int) -> list[tuple[str, str]]:
    """``(origin, text the gate reads)`` for every evaluation prompt."""
    out = [(src, compress(req).text) for source in SOURCES for src, req, _ in source(per_source)]
    for path in (EN_TEST, ZH_TEST, EN_DEV, ZH_DEV, EN_HELDOUT, ZH_HELDOUT):
        out += [(path.name, compress(r.request).text) for r in read_labelled(path)]
    return out


def utterance_texts(path: Path) -> list[str]:
    """What the gate reads of each utterance row written for llmroute (no ``source``)."""
    rows = [r for r in jsonl(path) if not r.get("source")]
    return [compress_text(r["text"]).text if "text" in r else
            compress_text("\n".join(m["content"] for m in r["messages"]
                                    if m["role"] == "user")).text for r in rows]


def pairs(texts: list[str], prompts: list[tuple[str, str]], threshold: float
          ) -> list[tuple[float, str, str, str]]:
    """``(jaccard, utterance, origin, prompt)`` at or above ``threshold``, best first."""
    index: dict[str, set[int]] = defaultdict(set)
    prompt_grams = [grams(p) for _, p in prompts]
    for i, g in enumerate(prompt_grams):
        for gram in g:
            index[gram].add(i)
    found = []
    for text in texts:
        mine = grams(text)
        hits: dict[int, int] = defaultdict(int)
        for gram in mine:
            for i in index.get(gram, ()):
                hits[i] += 1
        for i, common in hits.items():
            score = common / len(mine | prompt_grams[i])
            if score >= threshold:
                found.append((score, text, *prompts[i]))
    return sorted(found, reverse=True)


def main(argv: list[str] | None = None) -> int:
    """List near-duplicate pairs; returns 1 when there are any (``--smoke``: 0 — it shows
    the script runs; the pairs are in its RESULT)."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--utterances", type=Path, default=SHIPPED)
    p.add_argument("--threshold", type=float, default=0.6)
    p.add_argument("--per-source", type=int, default=None)
    args = p.parse_args(argv)
    if not DATA.is_dir():
        skip(f"no data at {DATA}")
    per_source = args.per_source or pick(mode(args), 300, 60, 2)
    texts, prompts = utterance_texts(args.utterances), evaluation_prompts(per_source)
    found = pairs(texts, prompts, args.threshold)
    for score, text, origin, prompt in found:
        print(f"{score:.2f} [{origin}] {prompt[:90]!r}\n     utterance {text[:90]!r}")
    print("RESULT " + json.dumps({"pairs": len(found), "utterances": len(texts),
                                  "prompts": len(prompts), "threshold": args.threshold}))
    return 1 if found and mode(args) != "smoke" else 0


if __name__ == "__main__":
    raise SystemExit(main())
