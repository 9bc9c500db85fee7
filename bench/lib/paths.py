"""The llmroute paths ``bench/overhead.py`` and ``bench/instructions.py`` measure, written
once: the benchmarks' cache folder, the routers' YAML configs (plain, gate on, observed;
the policies path's is ``policies.py``'s) and the probe that says a path answers.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

MASTER_KEY = "sk-" + "6c6c6d726f7574652d62656e63682d6b6579" * 2
"""The key every path is sent (LiteLLM's proxy refuses to start without a master key)."""


def cache_dir() -> Path:
    """``$LLMROUTE_CACHE/bench`` (default ``~/.cache/llmroute/bench``), made when missing."""
    root = Path(os.environ.get("LLMROUTE_CACHE") or "~/.cache/llmroute").expanduser()
    (root / "bench").mkdir(parents=True, exist_ok=True)
    return root / "bench"


def chat_ok(url: str, path: str = "/v1/chat/completions", key: str = MASTER_KEY) -> bool:
    """True when one short chat request to ``url`` answers 200 within 5 s."""
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(url + path, body.encode(),
                                 {"content-type": "application/json",
                                  "authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.status == 200


def router_config(work: Path, upstream: str, gate: bool, observed: bool = False,
                  data: Path | None = None) -> Path:
    """Write llmroute's config over ``upstream`` into ``work`` and return its path: one
    ``openai`` backend in pool ``bench``; the gate on (``semantic``) or off; ``observed``
    adds the per-request log line and the SQLite decision audit; the audit (``AUDIT``,
    emptied first) and stored Responses (``responses.sqlite3``) go into ``data``, default
    ``work``."""
    path = work / ("llmroute-gate.yaml" if gate else
                   "llmroute-observed.yaml" if observed else "llmroute.yaml")
    audit = (data or work) / AUDIT
    if observed:
        audit.unlink(missing_ok=True)
    path.write_text(f"""\
pools: {{bench: {{}}}}
backends:
  - {{id: up, pool: bench, engine: openai, base_url: "{upstream}", model: bench,
     context_length: 32768}}
routing: {{default_pool: bench}}
gate: {{kind: {'semantic' if gate else 'off'}}}
responses: {{path: "{(data or work) / 'responses.sqlite3'}"}}
""" + (f"""observe: {{log_requests: true, audit: {{path: "{audit}"}}}}\n""" if observed else ""))
    return path


AUDIT = "observed-audit.sqlite3"
"""The observed path's audit database, in the folder its config is written to."""
