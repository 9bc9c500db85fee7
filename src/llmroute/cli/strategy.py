"""Strategy commands: ``llmroute strategy schema``, ``llmroute strategy check DIR`` and
``llmroute strategy compare --url URL`` (``cli/compare.py``).

``schema`` prints the JSON Schema of a strategy file. ``check DIR [--config FILE]
[--queries FILE.jsonl]`` validates every strategy file in DIR against the config's pools
(the embedded default's without ``--config``) and exits 1 with one ``file:line: field:
message`` line per problem. With ``--queries`` it classifies each query with the config's
gate, prints the strategy it matches, and exits 1 when an ``expect`` fails. A query line is
``{"prompt": TEXT}`` or an OpenAI chat body (``messages``), with optional ``expect``
(a strategy id; ``builtin-single`` when none should match), ``headers`` (name → value, for
the header triggers), ``model`` and ``repeat`` (the prompt is repeated that many times:
large prompts without a large file).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmroute.errors import ConfigError, LLMRouteError

if TYPE_CHECKING:
    from llmroute.config import Config
    from llmroute.strategy.snapshot import StrategySet
    from llmroute.types import ChatRequest

_EXTRA = ("expect", "headers", "repeat")


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``strategy {schema,check,compare}`` on the top-level subparsers."""
    strategy = sub.add_parser("strategy", help="strategy files: print the schema, check a "
                              "directory and a query suite")
    action = strategy.add_subparsers(dest="strategy_command", required=True)
    action.add_parser("schema", help="print the JSON Schema of a strategy file")
    check = action.add_parser("check", help="validate a strategies directory (exit 1 on a "
                              "problem or a failed expectation)")
    check.add_argument("dir", type=Path)
    check.add_argument("--config", type=Path, help="the pools to check against (default: "
                       "the embedded default)")
    check.add_argument("--queries", type=Path, help="JSONL: {prompt} or an OpenAI body a "
                       "line, optional expect, headers, model, repeat")
    compare = action.add_parser("compare", help="split/shadow arms side by side and whether "
                                "the rollout rule holds (exit 1 when it fails)")
    compare.add_argument("--url", default="http://127.0.0.1:8000", help="the router")


def run(args: argparse.Namespace) -> int:
    """Run a strategy command; returns the exit code. Raises LLMRouteError for a bad
    config file."""
    if args.strategy_command == "schema":
        from llmroute.strategy.registry import register_builtins

        print(json.dumps(register_builtins().schema(), indent=2, ensure_ascii=False))
        return 0
    if args.strategy_command == "compare":
        from llmroute.cli.compare import compare

        return compare(args.url)
    from llmroute.config import load_config

    config = load_config(args.config)
    try:
        loaded = load_strategies(config, args.dir)
    except ConfigError as exc:
        print(exc.message, file=sys.stderr)
        return 1
    print(f"{args.dir}: {len(loaded.entries)} strateg{'y' if len(loaded.entries) == 1 else 'ies'}"
          f" OK: {', '.join(e.header for e in loaded.entries) or '(none)'}")
    if args.queries is None:
        return 0
    return asyncio.run(check_queries(config, loaded, args.queries))


def load_strategies(config: Config, directory: Path) -> StrategySet:
    """The strategies in ``directory`` over ``config``'s pools and served models (local
    engines are not started). Raises ConfigError naming file:line: field."""
    from llmroute.assemble.runtime import make_backends
    from llmroute.assemble.strategies import make_loader

    placeholders = {b.id: "http://127.0.0.1:9" for b in config.backends if b.launch}
    return make_loader(config, make_backends(config, placeholders)).load_dir(directory)


@dataclass(frozen=True)
class Query:
    """One query line: the ``request``, its ``headers`` and the ``expect``-ed strategy id
    (None: no expectation); ``line`` is its 1-based line number."""

    line: int
    request: ChatRequest
    headers: dict[str, str]
    expect: str | None


async def check_queries(config: Config, loaded: StrategySet, path: Path) -> int:
    """Print the strategy each query in ``path`` matches; 1 when a line is unusable or an
    expectation fails, else 0."""
    from llmroute.assemble.gate import make_gate

    gate = make_gate(config)
    await gate.start()
    failed = 0
    try:
        for q in read_queries(path):
            if isinstance(q, str):
                print(q)
                failed += 1
                continue
            intent = await gate.classify(q.request)
            header = loaded.select(q.request, intent, q.headers).header
            verdict = _verdict(header, q.expect)
            failed += verdict.startswith("FAIL")
            print(f"{path}:{q.line}: {header} (intent {intent.label}, "
                  f"{q.request.prompt_tokens} tokens) {verdict}")
    finally:
        await gate.close()
    print(f"{failed} failed" if failed else "all queries OK")
    return 1 if failed else 0


def _verdict(header: str, expect: str | None) -> str:
    if expect is None:
        return ""
    return "ok" if header.rsplit("@", 1)[0] == expect else f"FAIL (expected {expect})"


def read_queries(path: Path) -> Iterator[Query | str]:
    """Each non-blank line of ``path`` as a Query, or a ``file:line: problem`` string."""
    with path.open(encoding="utf-8") as lines:
        for n, text in enumerate(lines, 1):
            if text.strip():
                try:
                    yield _query(n, json.loads(text))
                except (ValueError, TypeError, LLMRouteError) as exc:
                    yield f"{path}:{n}: unusable query: {getattr(exc, 'message', exc)}"


def _query(n: int, data: Any) -> Query:
    from llmroute.api.wire import parse_chat
    from llmroute.gate.compress import prompt_request

    if not isinstance(data, dict):
        raise ValueError("a query line is a JSON object")
    headers = {str(k).lower(): str(v) for k, v in (data.get("headers") or {}).items()}
    body = {k: v for k, v in data.items() if k not in _EXTRA}
    if "messages" in body:
        request = parse_chat({"model": "auto", **body}, f"query-{n}")
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise ValueError("give a string prompt or OpenAI messages")
        request = prompt_request(prompt * int(data.get("repeat", 1)))
        request = request._replace(model=str(body.get("model", "auto")))
    return Query(n, request, headers, data.get("expect"))
