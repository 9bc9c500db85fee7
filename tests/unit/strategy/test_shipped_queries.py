"""The shipped strategy query suite (``local/strategy-queries.jsonl``) against the shipped
strategies and the embedded default's gate: every query classifies and matches the strategy
it expects (an empty prompt, a 1 MB prompt, random bytes, mixed scripts among them)."""

from __future__ import annotations

from pathlib import Path

import llmroute
from llmroute.cli.main import main

LOCAL = Path(llmroute.__file__).parent / "local"


def test_the_shipped_query_suite_passes(capsys):
    queries = LOCAL / "strategy-queries.jsonl"
    assert main(["strategy", "check", str(LOCAL / "strategies"), "--queries",
                 str(queries)]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith(f"{queries}:")]
    expected = sum(1 for ln in queries.read_text(encoding="utf-8").splitlines() if ln.strip())
    assert len(lines) == expected and "all queries OK" in out
    assert sum(ln.endswith(" ok") for ln in lines) == sum(
        '"expect"' in ln for ln in queries.read_text(encoding="utf-8").splitlines())
