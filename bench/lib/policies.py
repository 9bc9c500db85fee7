"""The ``llmroute-policies`` path of ``bench/overhead.py``: llmroute (gate off) with the
gateway policies on — auth, a key whose limits (RPM, TPM, daily and monthly tokens,
daily and monthly cost budgets, concurrency) are far too high ever to bind, a priced pool
(each attempt's cost computed and charged to the budgets), and the sensitive-word filter with a
10,000-word list applied to the input and the streamed/JSON output.

``setup(work, upstream)`` writes the word list, a fresh SQLite key store holding one tenant
and one key, and the router's YAML config into ``work``; it returns the config's path and
the key (the load generator sends it as ``authorization: Bearer …``). The router reads its
admin key from ``ADMIN_ENV`` (pass ``ADMIN_ENV: ADMIN_KEY`` in its environment).
"""

from __future__ import annotations

import asyncio
import random
import string
import time
from pathlib import Path

from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Limits, Tenant
from llmroute.policy.keystore import KeyStore

WORDS = 10_000
SEED = 22
ADMIN_ENV, ADMIN_KEY = "LLMROUTE_BENCH_ADMIN_KEY", "bench-admin-key"
HIGH = Limits(rpm=10**9, tpm=10**12, daily_tokens=10**15, monthly_tokens=10**15,
              daily_cost=1e12, monthly_cost=1e12, max_concurrency=10**6)
"""Limits that never bind, so every check and reservation runs and none refuses."""
TEXTS = ("say hello to the benchmark. #0123456789- the quick brown fox jumps over the lazy "
         "dog. tok0123456789 hello from the fake engine.")
"""What the load generator sends and the bench upstream answers (lower-cased): no listed
word may occur in it, so the filter scans everything and blocks nothing."""


def words(n: int = WORDS, seed: int = SEED) -> list[str]:
    """``n`` distinct lower-case words of 6-10 letters, the same for the same ``seed``,
    none occurring in ``TEXTS``."""
    rng, out = random.Random(seed), dict[str, None]()
    while len(out) < n:
        w = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(6, 10)))
        if w not in TEXTS:
            out[w] = None
    return list(out)


async def make_key(keys_path: Path) -> str:
    """A fresh key store at ``keys_path`` with tenant ``bench`` and one key (limits
    ``HIGH``); returns the key's secret."""
    keys_path.unlink(missing_ok=True)
    store = KeyStore(str(keys_path))
    try:
        await store.put_tenant(Tenant("bench"))
        secret, _ = await issue_key(store, "bench", time.time(), limits=HIGH)
    finally:
        store.close()
    return secret


def config_text(work: Path, upstream: str, key_cache_ttl_s: float = 5.0) -> str:
    """The router's YAML config over ``upstream``: gate off, auth on (keys in
    ``work/policies-keys.sqlite3``), the word list ``work/policies-words.txt`` filtering
    input and output (``block``)."""
    return f"""\
pools: {{bench: {{price: {{input_per_mtok: 0.5, output_per_mtok: 1.5}}}}}}
backends:
  - {{id: up, pool: bench, engine: openai, base_url: "{upstream}", model: bench,
     context_length: 32768}}
routing: {{default_pool: bench}}
gate: {{kind: off}}
auth: {{enabled: true, keys_path: "{work / 'policies-keys.sqlite3'}", admin_key_env: {ADMIN_ENV},
       cache_ttl_s: {key_cache_ttl_s}}}
content_filter:
  watch: false
  lists: [{{name: bench, path: "{work / 'policies-words.txt'}", action: block,
           applies_to: [input, output]}}]
"""


def setup(work: Path, upstream: str, key_cache_ttl_s: float = 5.0) -> tuple[Path, str]:
    """Write the word list, the key store and the config into ``work`` (keys cached for
    ``key_cache_ttl_s``, the default's 5 s unless a slowed server stretches it); returns the
    config's path and the key. Raises OSError when ``work`` is not writable."""
    (work / "policies-words.txt").write_text("\n".join(words()) + "\n")
    secret = asyncio.run(make_key(work / "policies-keys.sqlite3"))
    path = work / "llmroute-policies.yaml"
    path.write_text(config_text(work, upstream, key_cache_ttl_s))
    return path, secret
