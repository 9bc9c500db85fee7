"""A served router imports what its config uses: without auth, a shared state, an OTLP
export or KV-event endpoints, opening the Runtime imports no redis-py, PyJWT, OpenTelemetry
SDK or pyzmq (each costs start-up time: ``bench/startup.py``); configuring one imports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"
OPTIONAL = ("redis", "jwt", "cryptography", "opentelemetry.sdk", "opentelemetry.exporter", "zmq",
            "llmroute.state.redis", "llmroute.state.breakers", "llmroute.state.load",
            "llmroute.state.polls", "llmroute.state.prefix", "llmroute.state.answers",
            "llmroute.state.responses_redis", "llmroute.policy.keystore_redis",
            "llmroute.policy.jwt", "llmroute.policy.jwks", "llmroute.observe.otlp",
            "llmroute.anchor.sources.kv_events")
CONFIG = """\
gate: {kind: "off"}
pools: {general: {}}
backends: [{id: a, pool: general, engine: openai, model: m, base_url: "http://127.0.0.1:9"}]
routing: {default_pool: general}
"""
OPEN = """\
import asyncio, json, sys
from pathlib import Path
import llmroute.assemble.serve
from llmroute.assemble.runtime import open_runtime
from llmroute.config import load_config

async def main():
    async with open_runtime(load_config(Path(sys.argv[1]))):
        pass

asyncio.run(main())
print(json.dumps(sorted(m for m in sys.modules if m.startswith(%r))))
"""


def opened(tmp_path: Path, config: str) -> list[str]:
    """The OPTIONAL modules a fresh interpreter holds after opening (and closing) the
    Runtime of ``config``."""
    path = tmp_path / "router.yaml"
    path.write_text(config)
    done = subprocess.run([sys.executable, "-c", OPEN % (OPTIONAL,), str(path)],
                          capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "PYTHONPATH": str(SRC)})
    return json.loads(done.stdout.splitlines()[-1])


def test_a_plain_config_opens_without_the_optional_libraries(tmp_path):
    assert opened(tmp_path, CONFIG) == []


def test_an_otlp_export_imports_the_sdk_when_configured(tmp_path):
    config = CONFIG + "observe: {otlp: {endpoint: \"http://127.0.0.1:9/v1/traces\"}}\n"
    modules = opened(tmp_path, config)
    assert "llmroute.observe.otlp" in modules
    assert "opentelemetry.sdk" in modules
    assert "redis" not in modules and "zmq" not in modules
