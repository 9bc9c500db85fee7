"""The command line imports only what the chosen command runs: building the parser pulls in
no part of the router, and ``serve`` on a port in use exits before the gate, the strategies
or the exporters are imported."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"
HEAVY = ("opentelemetry", "redis", "aiohttp", "onnxruntime", "tokenizers", "numpy",
         "llmroute.assemble", "llmroute.gate", "llmroute.flow", "llmroute.strategy.registry",
         "llmroute.strategy.loader", "llmroute.observe.otlp", "llmroute.policy.keystore_redis")
SHOW = ("import json, sys; print(json.dumps(sorted(m for m in sys.modules if m.startswith("
        f"{HEAVY!r}))))")
CONFIG = """\
pools: {general: {}}
backends: [{id: a, pool: general, engine: openai, model: m, base_url: "http://127.0.0.1:9"}]
routing: {default_pool: general}
"""


def imported(code: str) -> list[str]:
    """The HEAVY modules a fresh interpreter holds after running ``code``."""
    done = subprocess.run([sys.executable, "-c", f"{code}\n{SHOW}"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=120,
                          check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_building_the_parser_imports_no_part_of_the_router():
    code = "from llmroute.cli.main import _parser; _parser()"
    assert imported(code) == []
    assert imported(code.replace("_parser()", "_parser().parse_args(['keys', 'list'])")) == []


def test_parser_modules_import_no_config_or_pydantic():
    code = "from llmroute.cli.main import _parser; _parser()"
    extra = "; import sys; assert not [m for m in sys.modules if m.startswith(('pydantic', " \
            "'llmroute.config', 'uvicorn', 'structlog'))], 'heavy parser'"
    assert imported(code + extra) == []


def test_serve_on_a_port_in_use_exits_before_importing_the_router(tmp_path):
    config = tmp_path / "router.yaml"
    config.write_text(CONFIG)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code = ("from llmroute.cli.main import main; "
                f"assert main(['serve', '--config', {str(config)!r}, '--port', '{port}']) == 2")
        assert imported(code) == []
