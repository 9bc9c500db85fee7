"""Gate commands: ``llmroute classify TEXT``, ``llmroute gate fit --data FILE``,
``llmroute gate eval --data FILE``, ``llmroute gate fit-router --data FILE [--pools A,B]``.

``gate fit-router`` checks an outcome file (``gate/outcomes.py``; every error names the line
and field, nothing is written), fits the win head for the ladder ``--pools`` (cheapest
first; default the config's ``gate.router.pools``) and stores it in the gate's heads folder,
where a gate whose ``gate.router`` names the same file and pools reads it on start.

``gate fit`` checks a labelled file, fits the heads on the shipped utterances plus its
examples, and stores the examples as ``$LLMROUTE_CACHE/gate/user-examples.jsonl``, which
every later gate start fits on too. ``gate eval`` prints per-intent precision/recall/F1,
macro-F1 and the confusion matrix (strict: only a row's ``intent`` counts), then the
macro-F1 where a row's ``also`` intents count too, and ``RESULT {"macro_f1",
"macro_f1_also", "n", "per_intent"}`` last.
Labels outside the configured intents are reported and skipped in both. ``classify`` and
``gate eval`` start the gate as the router does (``asyncio.run``) and ask it through its one
entry point, ``await gate.classify(request)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmroute.config import Config
    from llmroute.gate.examples import Example
    from llmroute.gate.protocol import Gate


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``classify`` and ``gate {fit,eval}`` on the top-level subparsers."""
    classify = sub.add_parser("classify", help="print the gate's Intent for a prompt")
    classify.add_argument("text")
    classify.add_argument("--config", type=Path)
    gate = sub.add_parser("gate", help="fit or evaluate the semantic gate")
    action = gate.add_subparsers(dest="gate_command", required=True)
    for name, text in (("fit", "refit the heads with your labelled JSONL"),
                       ("eval", "score the gate on a labelled JSONL")):
        cmd = action.add_parser(name, help=text)
        cmd.add_argument("--data", type=Path, required=True,
                         help="one JSON object a line: prompt or messages, and intent")
        cmd.add_argument("--config", type=Path)
    router = action.add_parser("fit-router", help="fit the win head on an outcome JSONL")
    router.add_argument("--data", type=Path, required=True,
                        help="one JSON object a line: prompt or messages, and outcomes")
    router.add_argument("--pools", type=lambda v: tuple(p for p in v.split(",") if p),
                        help="the ladder, cheapest first, comma-separated")
    router.add_argument("--config", type=Path)


def run(config: Config, args: argparse.Namespace) -> int:
    """Run a gate command; returns the exit code. Raises LLMRouteError for bad input."""
    if args.command == "classify":
        return classify(config, args.text)
    if args.gate_command == "fit":
        return fit(config, args.data)
    if args.gate_command == "fit-router":
        return fit_router(config, args.data, args.pools)
    return evaluate(config, args.data)


@asynccontextmanager
async def started_gate(config: Config) -> AsyncIterator[Gate]:
    """The semantic gate of ``config``, started (heads fitted, encoder loaded) and closed on
    exit. Raises ConfigError for unusable examples or rules."""
    from llmroute.gate.semantic import SemanticGate
    gate = SemanticGate(config.gate)
    await gate.start()
    try:
        yield gate
    finally:
        await gate.close()


def classify(config: Config, text: str) -> int:
    """Print the Intent of ``text`` and the time the classification took."""
    return asyncio.run(_classify(config, text))


async def _classify(config: Config, text: str) -> int:
    from llmroute.gate.compress import compress, prompt_request

    request = prompt_request(text)
    async with started_gate(config) as gate:
        t0 = time.perf_counter()
        intent = await gate.classify(request)
        ms = (time.perf_counter() - t0) * 1000
    print(json.dumps({"label": intent.label, "confidence": intent.confidence,
                      "runners_up": intent.runners_up, "conflict": intent.conflict,
                      "entropy": intent.entropy, "composite": intent.composite,
                      "complexity": intent.complexity, "source": intent.source},
                     ensure_ascii=False, indent=2))
    print(f"classified in {ms:.2f} ms (compressed to {len(compress(request).text)} chars)")
    return 0


def known(config: Config, examples: Sequence[Example]) -> list[Example]:
    """The examples whose label is a configured intent; the others are reported."""
    from llmroute.gate.intents import INTENTS

    labels = set(INTENTS) | set(config.gate.utterances)
    unknown = Counter(e.intent for e in examples if e.intent not in labels)
    for label, n in sorted(unknown.items()):
        print(f"skipped {n} example(s) labelled {label!r}: not a configured intent")
    return [e for e in examples if e.intent in labels]


def fit(config: Config, data: Path) -> int:
    """Store ``data``'s usable examples for the gate and fit once to check them."""
    from llmroute.gate.examples import read_labelled, user_examples_path
    from llmroute.gate.semantic import SemanticGate

    examples = known(config, read_labelled(data))
    path = user_examples_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"messages": e.request.body["messages"],
                                        "intent": e.intent}, ensure_ascii=False) + "\n"
                            for e in examples), encoding="utf-8")
    t0 = time.perf_counter()
    model = SemanticGate(config.gate).load()
    print(f"fitted {len(model.classes)} intents with {len(examples)} example(s) from {data} "
          f"in {time.perf_counter() - t0:.1f} s; stored in {path} (used from the next start)")
    return 0


def fit_router(config: Config, data: Path, pools: tuple[str, ...] | None) -> int:
    """Fit (or find already fitted) the win head for ``pools`` on ``data`` and say where it
    is. Raises ConfigError for a bad file or a ladder of fewer than two pools."""
    from llmroute.errors import ConfigError
    from llmroute.gate.outcomes import read_outcomes
    router = config.gate.router
    ladder = pools or (router.pools if router is not None else ())
    if len(ladder) < 2 or len(set(ladder)) != len(ladder):
        raise ConfigError("--pools: need at least two different pools, cheapest first "
                          "(or gate.router.pools in the config)")
    read_outcomes(data, ladder)  # every bad line is refused before the gate is fitted
    from llmroute.gate.heads_cache import heads_dir
    from llmroute.gate.semantic import SemanticGate
    from llmroute.gate.win_store import fit_router as fit_head
    t0 = time.perf_counter()
    model = SemanticGate(config.gate.model_copy(update={"router": None})).load()
    head, cached = fit_head(model, data, ladder, heads_dir(config.gate.cache_dir))
    how = "already fitted" if cached else f"fitted in {time.perf_counter() - t0:.1f} s"
    print(f"win head for {' < '.join(ladder)} on {data}: {how} "
          f"({len(head.calibration)} rows; key {head.key})")
    _quantiles(head.calibration, ladder)
    if router is None or router.data != str(data) or tuple(router.pools) != ladder:
        print(f"serve with it: gate.router: {{data: {data}, pools: [{', '.join(ladder)}]}}")
    return 0


def _quantiles(calibration: Any, ladder: Sequence[str]) -> None:
    """Print the p10/p50/p90 of each cheaper pool's out-of-fold probabilities
    (``calibration`` ``(rows, len(ladder) − 1)``)."""
    import numpy as np
    for j, pool in enumerate(ladder[:-1]):
        p10, p50, p90 = np.quantile(calibration[:, j], (0.1, 0.5, 0.9))
        print(f"  {pool}: out-of-fold probability of answering as well as {ladder[-1]}: "
              f"p10 {p10:.3f}, p50 {p50:.3f}, p90 {p90:.3f}")


def evaluate(config: Config, data: Path) -> int:
    """Score the gate on ``data``; the last line is ``RESULT {…}``."""
    from llmroute.gate.evaluate import lenient, report, score
    from llmroute.gate.examples import read_labelled

    examples = known(config, read_labelled(data))
    if not examples:
        print('RESULT {"macro_f1": 0.0, "macro_f1_also": 0.0, "n": 0, "per_intent": {}}')
        return 1
    pred = asyncio.run(_labels(config, examples))
    truth = [e.intent for e in examples]
    s = score(truth, pred)
    loose = score(lenient(truth, pred, [e.also for e in examples]), pred)
    print(report(s))
    print(f"macro-F1 where an also label counts: {loose.macro_f1:.3f} "
          f"({sum(bool(e.also) for e in examples)} rows carry also)")
    per = {k: {"precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4), "n": n}
           for k, (p, r, f, n) in s.per_intent.items()}
    print("RESULT " + json.dumps({"macro_f1": round(s.macro_f1, 4),
                                  "macro_f1_also": round(loose.macro_f1, 4), "n": s.n,
                                  "per_intent": per}))
    return 0


async def _labels(config: Config, examples: Sequence[Example]) -> list[str]:
    """The started gate's label for each example, in order."""
    async with started_gate(config) as gate:
        return [(await gate.classify(e.request)).label for e in examples]
