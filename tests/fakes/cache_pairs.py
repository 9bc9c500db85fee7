"""An answer cache that has stored one prompt's answer, every prompt at the same vector, so
only the guards decide what a second prompt gets (``tests/unit/cache``)."""

from __future__ import annotations

import numpy as np

from llmroute.cache.answers import AnswerCache, Lookup, Scope
from llmroute.config.cache import CacheConfig
from llmroute.types import ChatRequest, Intent

SCOPE = Scope("t", "", "r")
INTENT = Intent("open_qa", 0.9, embedding=np.full(4, 0.5, dtype=np.float32))


def chat(text: str) -> ChatRequest:
    """A one-message chat request of ``text``."""
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return ChatRequest("chat", body, "m", False, text, 9, None, "r")


async def stored(first: str) -> AnswerCache:
    """A cache (defaults, semantic tier on) holding an answer to ``first``."""
    async def no_embed(_: ChatRequest) -> None:
        return None
    cache = AnswerCache(CacheConfig(enabled=True), no_embed, lambda: 1000.0)
    answer = {"object": "chat.completion", "model": "m", "choices": [{
        "index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}]}
    found = await cache.lookup(chat(first), INTENT, SCOPE, {})
    cache.store(found, chat(first), INTENT, SCOPE, answer)
    return cache


async def ask(cache: AnswerCache, text: str) -> Lookup:
    """The cache's verdict on ``text``."""
    return await cache.lookup(chat(text), INTENT, SCOPE, {})
