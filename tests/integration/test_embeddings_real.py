"""``POST /v1/embeddings`` through the router to a real ``llama-server`` started with
``--embeddings`` on the bundled SmolLM2-135M, called with the unmodified ``openai`` SDK.

Skipped when the engine binary or the model is missing — except in CI (``CI`` set), where
that fails.
"""

from __future__ import annotations

import math

import openai
import pytest
from fakes.real import real_router

pytestmark = pytest.mark.slow

CONFIG = """\
gate: {kind: off}
pools: {general: {}, embed: {}}
backends:
  - {id: chat, pool: general, engine: openai, model: m, base_url: "http://127.0.0.1:9"}
  - {id: smol-embed, pool: embed, engine: llamacpp, mode: embeddings,
     launch: {ctx_size: 1024, slots: 2, threads: 1, extra_args: [--embeddings, --pooling, mean]}}
routing: {default_pool: general}
"""


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


async def test_embeddings_from_a_real_engine_through_the_sdk():
    async with real_router(CONFIG, "test_embeddings_real") as (_, url):
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        texts = ["The cat sat on the mat.", "The cat sat on the mat.", "量子计算机如何工作？"]
        out = await client.embeddings.create(model="embed", input=texts)
        again = await client.embeddings.create(model="auto", input="The cat sat on the mat.")
        with pytest.raises(openai.NotFoundError):
            await client.embeddings.create(model="general", input="x")
    vectors = [d.embedding for d in out.data]
    assert [d.index for d in out.data] == [0, 1, 2]
    assert len({len(v) for v in vectors}) == 1 and len(vectors[0]) == 576  # SmolLM2 hidden
    assert _cosine(vectors[0], vectors[1]) > 0.999  # the same text, the same vector
    assert _cosine(vectors[0], vectors[2]) < 0.999
    assert _cosine(again.data[0].embedding, vectors[0]) > 0.999
    assert out.usage.prompt_tokens > 0
