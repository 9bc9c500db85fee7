"""Context length with a real engine's tokenizer: one local ``llama-server`` (SmolLM2-135M,
1,024-token context) behind the real router. An emoji- and CJK-punctuation-heavy prompt,
which the character estimate puts far below the context, is counted by the engine's own
``/apply-template`` + ``/tokenize``, and the 400 carries that count."""

from __future__ import annotations

import re

import httpx
import pytest
from fakes.real import real_router

pytestmark = [pytest.mark.slow]

CONFIG = """\
pools:
  general: {description: everyday chat}
backends:
  - id: small
    pool: general
    engine: llamacpp
    launch: {ctx_size: 1024, slots: 1, threads: 1}
routing: {default_pool: general}
gate: {kind: "off"}
"""
HEAVY = "😀，🚀。🎉！" * 80  # 480 characters: ~160 estimated tokens, far more real ones


async def _engine_count(base_url: str, messages: list[dict[str, str]]) -> int:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as engine:
        prompt = (await engine.post("/apply-template", json={"messages": messages})).json()
        tokens = await engine.post("/tokenize", json={"content": prompt["prompt"],
                                                      "add_special": True})
        return len(tokens.json()["tokens"])


async def test_the_400_carries_the_engines_real_count_of_an_emoji_heavy_prompt():
    async with real_router(CONFIG, "tokens-real.yaml") as (rt, url):
        messages = [{"role": "user", "content": HEAVY}]
        real = await _engine_count(rt.backends["small"].base_url, messages)
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            r = await client.post("/v1/chat/completions", json={
                "model": "general", "max_tokens": 16, "messages": messages})
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["code"] == "context_length_exceeded"
            counted = int(re.search(r"needs (\d+) prompt tokens", err["message"])[1])
            estimate = 4 + (len(HEAVY) + 2) // 3
            assert counted == real and counted > 1024 - 16 > 2 * estimate
            small = [{"role": "user", "content": HEAVY[:60]}]
            ok = await client.post("/v1/chat/completions", json={
                "model": "general", "max_tokens": 8, "messages": small})
            assert ok.status_code == 200, ok.text
