"""What each engine kind can do for the result fuse: per-token logprobs, and the request form
that makes it continue an assistant message already begun (prefix continuation).

| engine | logprobs | continuation form | answer echoes the prefix |
|---|---|---|---|
| ``vllm``, ``sglang``, ``emulator`` | yes | ``continue_final_message: true`` + ``add_generation_prompt: false`` | no |
| ``llamacpp`` | yes | trailing assistant message (assistant prefill) | **yes** |
| ``ollama``, ``openai`` | no | generic: assistant prefix + a user "continue" instruction | no |

The llama.cpp row was learned from the real ``llama-server`` (the build from the
``llama-cpp-python`` 0.3.36 sdist): streamed, its first content delta is the prefix followed
by the first new token; its ``logprobs`` cover only the new tokens. The vLLM/SGLang form is
their documented chat-completions extra parameters. Hosted OpenAI-compatible APIs and
Ollama's OpenAI endpoint neither promise logprobs nor continue a trailing assistant message,
so they get the generic form (see ``fuse/handoff.py``) and no entropy trigger.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ContinuationForm(enum.Enum):
    """How a request asks an engine to continue an assistant message."""

    CONTINUE_FINAL_MESSAGE = "continue_final_message"
    ASSISTANT_PREFILL = "assistant_prefill"
    GENERIC = "generic"


@dataclass(frozen=True, slots=True)
class Capabilities:
    """One engine kind: ``logprobs`` (streams per-token ``top_logprobs``), the
    ``continuation`` form, ``echoes_prefix`` (its answer repeats the assistant prefix) and
    ``logprobs_with_tools`` (it accepts ``logprobs`` on a streamed request with ``tools``:
    llama-server answers 400 "logprobs is not supported with tools + stream")."""

    logprobs: bool
    continuation: ContinuationForm
    echoes_prefix: bool = False
    logprobs_with_tools: bool = True


_TABLE: dict[str, Capabilities] = {
    "vllm": Capabilities(True, ContinuationForm.CONTINUE_FINAL_MESSAGE),
    "sglang": Capabilities(True, ContinuationForm.CONTINUE_FINAL_MESSAGE),
    "emulator": Capabilities(True, ContinuationForm.CONTINUE_FINAL_MESSAGE),
    "llamacpp": Capabilities(True, ContinuationForm.ASSISTANT_PREFILL, echoes_prefix=True,
                             logprobs_with_tools=False),
    "ollama": Capabilities(False, ContinuationForm.GENERIC),
    "openai": Capabilities(False, ContinuationForm.GENERIC),
}
_UNKNOWN = Capabilities(False, ContinuationForm.GENERIC)


def capabilities(engine: str) -> Capabilities:
    """The capabilities of engine kind ``engine`` (an unknown kind gets the generic row)."""
    return _TABLE.get(engine, _UNKNOWN)
