"""``entropy_armed``: the one answer to "does the entropy trigger run for this request on
this backend?", for the relay and /debug/fuse alike."""

from __future__ import annotations

import pytest

from llmroute.config import FuseConfig
from llmroute.fuse.arming import entropy_armed
from llmroute.types import Backend

ON, OFF = FuseConfig(), FuseConfig(enabled=False)


def backend(engine: str, caps: frozenset[str] | None = None) -> Backend:
    return Backend("b", "general", engine, "http://x", "m", 4096, None, caps)


@pytest.mark.parametrize(("fuse", "engine", "caps", "endpoint", "tools", "armed"), [
    (ON, "vllm", None, "chat", False, True),
    (ON, "vllm", None, "chat", True, True),
    (ON, "llamacpp", None, "chat", False, True),
    (ON, "llamacpp", None, "chat", True, False),
    (ON, "vllm", None, "completions", False, False),
    (ON, "ollama", None, "chat", False, False),
    (ON, "openai", None, "chat", False, False),
    (ON, "vllm", frozenset({"tools"}), "chat", False, False),
    (ON, "ollama", frozenset({"logprobs"}), "chat", False, True),
    (OFF, "vllm", None, "chat", False, False),
], ids=["vllm-chat", "vllm-tools", "llamacpp-chat", "llamacpp-tools-refused", "completions",
        "ollama", "openai", "configured-without-logprobs", "configured-with-logprobs",
        "fuse-off"])
def test_armed_only_where_the_request_can_carry_logprobs(fuse, engine, caps, endpoint, tools,
                                                         armed):
    assert entropy_armed(fuse, backend(engine, caps), endpoint, tools) is armed
