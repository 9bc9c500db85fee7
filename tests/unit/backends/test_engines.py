"""The engine-kind table: one row per kind, read by config validation, the capability
filter, the handoff and the collector."""

from __future__ import annotations

import pytest

from llmroute.backends.engines import (
    ENGINES,
    ContinuationForm,
    capabilities,
    capabilities_of,
    engine_kind,
)
from llmroute.config import parse_config
from llmroute.types import Backend

CONFIG = """\
pools: {p: {}}
backends:
  - {id: x, pool: p, engine: ENGINE, base_url: "http://h:1"}
routing: {default_pool: p}
"""


def backend(engine: str, caps: frozenset[str] | None = None) -> Backend:
    return Backend("x", "p", engine, "http://h:1", "m", 4096, capabilities=caps)


def test_the_kinds_config_accepts_are_the_table_s():
    assert set(ENGINES) == {"vllm", "sglang", "llamacpp", "ollama", "openai", "emulator"}
    for engine in ENGINES:
        assert parse_config(CONFIG.replace("ENGINE", engine), "t.yaml").backends[0].engine \
            == engine


@pytest.mark.parametrize("engine,defaults,form,metrics", [
    ("vllm", {"tools", "logprobs", "continuation", "n"}, ContinuationForm.CONTINUE_FINAL_MESSAGE,
     ("vllm", ("/metrics",))),
    ("sglang", {"tools", "logprobs", "continuation", "n"}, ContinuationForm.CONTINUE_FINAL_MESSAGE,
     ("sglang", ("/metrics",))),
    ("emulator", {"tools", "logprobs", "continuation"},
     ContinuationForm.CONTINUE_FINAL_MESSAGE, ("vllm", ("/metrics",))),
    ("llamacpp", {"tools", "logprobs", "continuation"}, ContinuationForm.ASSISTANT_PREFILL,
     ("llamacpp", ("/metrics", "/slots"))),
    ("ollama", {"tools"}, ContinuationForm.GENERIC, ("ollama", ("/api/ps",))),
    ("openai", {"tools"}, ContinuationForm.GENERIC, None),
    ("tgi", {"tools"}, ContinuationForm.GENERIC, None),
], ids=["vllm", "sglang", "emulator", "llamacpp", "ollama", "openai", "unknown"])
def test_rows(engine, defaults, form, metrics):
    row = engine_kind(engine)
    assert row.defaults == defaults == capabilities_of(backend(engine))
    assert capabilities(engine).continuation is form
    assert (None if row.metrics is None else (row.metrics.format, row.metrics.paths)) == metrics
    assert row.launch is (engine == "llamacpp")


def test_configured_capabilities_replace_the_kind_s_defaults():
    assert capabilities_of(backend("vllm", frozenset({"tools"}))) == {"tools"}
