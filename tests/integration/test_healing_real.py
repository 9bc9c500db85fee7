"""Quality ejection on real engines: two ``llama-server``s on the bundled SmolLM2-135M, one
started with a sampling setting that ruins it (temperature 2.5, every truncation sampler off:
``docs/fuse.md``'s hot-sampled nonsense). A running router hands its streams off (the
entropy trigger), demotes it — cut, then ejected, or ejected at once when every answer
melts — and, once it is restarted on the same
port with the default sampling, probes it back to healthy.

Skipped when the engine binary or the model is missing — except in CI (``CI`` set), where
that fails. About half a minute of engine time on one core each.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx
import pytest
import structlog
from fakes.real import skip_or_fail

from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from llmroute.assemble.runtime import open_runtime
from llmroute.config import parse_config
from llmroute.errors import EngineError
from llmroute.local.build import ensure_llama_server
from llmroute.local.engines import EngineSpec, child_env, engine_command, free_port
from llmroute.local.model import bundled_gguf
from llmroute.types import QualityState

pytestmark = pytest.mark.slow
RUINED = ("--temp", "2.5", "--top-k", "0", "--top-p", "1.0", "--min-p", "0")
CONFIG = """\
anchor: {{picker: round-robin, poll_interval_s: 0.2}}
quality: {{min_answers: 6, alpha: 1.0e-3, cut_s: 1, cooloff_s: 2, probe_share: 1.0,
           tick_s: 0.25, window_s: 300}}
pools: {{general: {{}}}}
backends:
  - {{id: good, pool: general, engine: llamacpp, base_url: "{good}",
     model: smollm2-135m-instruct, context_length: 1024}}
  - {{id: ruined, pool: general, engine: llamacpp, base_url: "{ruined}",
     model: smollm2-135m-instruct, context_length: 1024}}
routing: {{default_pool: general}}
"""
BODY = {"model": "auto", "max_tokens": 12, "stream": True,
        "messages": [{"role": "user", "content": "Name three colours."}]}


@contextlib.asynccontextmanager
async def llama(port: int, extra: tuple[str, ...], log: Path) -> AsyncIterator[None]:
    """A ``llama-server`` on ``port`` with ``extra`` arguments, healthy, until the block
    ends."""
    try:
        binary, model = await ensure_llama_server(), bundled_gguf()
    except EngineError as err:
        skip_or_fail(f"local engines are not available: {err.message}")
    argv = engine_command(EngineSpec("e", 1024, slots=2, extra_args=extra), binary, model, port)
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=out, stderr=out,
                                                    env=child_env(), start_new_session=True)
    try:
        await healthy(f"http://127.0.0.1:{port}/health", proc)
        yield
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def healthy(url: str, proc: asyncio.subprocess.Process) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            assert proc.returncode is None, "llama-server exited during startup"
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.2)
    pytest.fail(f"{url} never answered 200")


async def until(rt, states: QualityState | set[QualityState], http: httpx.AsyncClient,
                limit: int = 80) -> int:
    """Send requests until ``ruined`` is in one of ``states``; how many were sent."""
    wanted = states if isinstance(states, set) else {states}
    for sent in range(limit):
        if rt.healing.ejector.state("ruined") in wanted:
            return sent
        await http.post("/v1/chat/completions", json=BODY)
        await asyncio.sleep(0.3)  # a tick or two of the healing loop
    pytest.fail(f"ruined never became {wanted}: {rt.healing.report()['ruined']}")


async def test_a_ruined_engine_is_demoted_and_probed_back_once_restored(tmp_path):
    good, ruined = free_port(), free_port()
    config = parse_config(CONFIG.format(good=f"http://127.0.0.1:{good}",
                                        ruined=f"http://127.0.0.1:{ruined}"), "healing-real")
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(llama(good, (), tmp_path / "good.log"))
        bad = await stack.enter_async_context(contextlib.AsyncExitStack())
        await bad.enter_async_context(llama(ruined, RUINED, tmp_path / "ruined.log"))
        rt = await stack.enter_async_context(open_runtime(config))
        url = await stack.enter_async_context(serve_in_background(create_app(config,
                                                                             runtime=rt)))
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=120))
        with structlog.testing.capture_logs() as logs:  # cut, or ejected at once
            await until(rt, {QualityState.CUT, QualityState.EJECTED}, http)
        demoted = next(e for e in logs if e["event"] == "quality_state")
        assert demoted["bad"] >= 6 and demoted["bad_ratio"] > 0.8
        await until(rt, QualityState.EJECTED, http)
        await bad.aclose()  # mend it: the same port, the default sampling
        await bad.enter_async_context(llama(ruined, (), tmp_path / "mended.log"))
        await until(rt, QualityState.PROBING, http)
        probes = await until(rt, QualityState.HEALTHY, http)
        metrics = (await http.get("/metrics")).text
    assert probes >= 6  # judged on its own probes, never on fewer than min_answers
    assert 'llmroute_backend_quality_state{backend="ruined"} 0.0' in metrics
    assert 'llmroute_quality_transitions_total{backend="ruined",to="ejected"}' in metrics
    assert os.path.getsize(tmp_path / "mended.log") > 0
