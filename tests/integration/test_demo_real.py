"""The README's demo, end to end: the embedded default config (three real llama.cpp engines
in two pools), every built-in prompt — code, maths, long summaries, translation, a streamed
tool call, a multi-turn chat, Chinese — answered over HTTP."""

from __future__ import annotations

import io

import pytest
from fakes.real import skip_or_fail
from rich.console import Console

from llmroute.config import load_config
from llmroute.demo.main import run_demo
from llmroute.errors import EngineError

pytestmark = pytest.mark.slow


async def test_builtin_demo_answers_every_prompt_across_pools_and_backends():
    out = io.StringIO()
    try:
        code = await run_demo(load_config(), None, max_tokens=24,
                              console=Console(file=out, width=160))
    except EngineError as err:
        skip_or_fail(f"local engines are not available: {err.message}")
    text = out.getvalue()
    assert code == 0, text
    assert "11/11 requests answered" in text
    for name in ("general-1", "general-2", "long-1", "long-context", "tool_call"):
        assert name in text, text
