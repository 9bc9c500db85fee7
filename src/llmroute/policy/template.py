"""What a chat template adds to a prompt, learned once per backend from its own tokenizer.

The prompt-size estimate (``text.py``) counts each message's text plus 4 tokens; an engine
renders the messages through its model's chat template first, which can add a default system
prompt and a generation prompt: SmolLM2's turns "hi" (estimated 5 tokens) into 31. That
fixed part is learned per backend by counting two probe chats with the backend's own
tokenize endpoint (llama-server ``/apply-template`` + ``/tokenize``; vLLM's and SGLang's
``/tokenize`` with ``messages``): one empty user message (``one``), and user + assistant +
user, all empty (``three``). A message's own wrapping is ``(three - one) / 2`` tokens and the
fixed part ``one`` less one wrapping; a wrapping beyond the estimate's 4 tokens a message is
left to the estimate's margin.

``TemplateBook.fixed`` is the most any chat backend's template adds (tokens): the learned
figure for backends learned, ``default`` (``tokens.template_tokens``) for the others —
backends whose engine has no tokenize endpoint (Ollama, hosted APIs) and those not learned
yet; it widens the estimate's upper bound, so a prompt near a limit is counted.
``TemplateBook.known`` is the most a learned template adds (0 before any is learned): an
estimate that could not be counted is taken with it. ``learn`` probes the backends not learned yet; ``keep_learning`` does it in the
background until all are, every ``period_s``, each probe bounded by the tokenizer's own
time limit. Nothing runs per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import structlog

from llmroute.errors import BackendError
from llmroute.policy.tokenizers import EngineTokenizer, Tokenizer
from llmroute.text import MESSAGE_OVERHEAD_TOKENS
from llmroute.types import Backend, ChatRequest

log = structlog.get_logger("llmroute.tokens")

_ONE = ({"role": "user", "content": ""},)
_THREE = ({"role": "user", "content": ""}, {"role": "assistant", "content": ""},
          {"role": "user", "content": ""})


def probe(messages: Sequence[dict[str, str]]) -> ChatRequest:
    """A chat of ``messages`` to count (no text: only the template's tokens)."""
    body = {"model": "probe", "messages": list(messages)}
    return ChatRequest("chat", body, "probe", False, "", 0, None, "template-probe")


def fixed_tokens(one: int, three: int) -> int:
    """The template's fixed tokens from the two probe counts (module docstring), ≥ 0, less
    the estimate's own 4 tokens of the one message."""
    wrapping = max((three - one) / 2, 0.0)
    return max(round(one - wrapping) + max(round(wrapping) - MESSAGE_OVERHEAD_TOKENS, 0), 0)


class TemplateBook:
    """The chat ``backends`` (with their tokenizer, or None) and what their templates add;
    ``default`` (tokens) for a backend not learned."""

    def __init__(self, backends: Sequence[tuple[Backend, Tokenizer | None]], default: int):
        self._default = default
        self._todo = [(b, t) for b, t in backends if isinstance(t, EngineTokenizer)]
        self.learned: dict[str, int] = {}
        self._others = len(backends) > len(self._todo) or not backends
        self.fixed = default
        self.known = 0
        self._update()

    @property
    def done(self) -> bool:
        """True when every backend that can be learned is."""
        return not self._todo

    def of(self, backend_id: str) -> int:
        """The tokens ``backend_id``'s template adds (learned, else the default)."""
        return self.learned.get(backend_id, self._default)

    async def learn(self) -> None:
        """Probe each backend not learned yet; one that fails stays for the next round."""
        left = []
        for backend, tokenizer in self._todo:
            try:
                one = await tokenizer.count(probe(_ONE))
                three = await tokenizer.count(probe(_THREE))
            except (BackendError, TimeoutError):
                left.append((backend, tokenizer))
                continue
            self.learned[backend.id] = fixed_tokens(one, three)
            log.info("template_learned", backend=backend.id, tokens=self.learned[backend.id])
        self._todo = left
        self._update()

    @asynccontextmanager
    async def keep_learning(self, period_s: float = 5.0) -> AsyncIterator[None]:
        """Learn in the background (every ``period_s`` until done) for the block's length."""
        async def run() -> None:
            while not self.done:
                await self.learn()
                if not self.done:
                    await asyncio.sleep(period_s)
        task = asyncio.create_task(run()) if self._todo else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()

    def _update(self) -> None:
        figures = list(self.learned.values())
        self.known = max(figures, default=0)
        if self._todo or self._others:
            figures.append(self._default)
        self.fixed = max(figures, default=0)
