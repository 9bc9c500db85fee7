"""``GET /dashboard`` in a real headless Chromium (Debian's ``chromium`` driven by Playwright
with ``executable_path``): with no traffic and no signals every section says so; after
traffic with a handoff every section shows live data — backend names, a non-zero request
rate, the handoff in the fuse heat map, a trace opened from ``decisions``. Any console error
or page error fails the test. Skipped only when no Chromium or no Playwright is found."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from fakes.observed import observed_router, send_traffic
from fakes.router import make_config
from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from llmroute.assemble.runtime import make_backends, wire
from llmroute.types import Answer, EngineSignals

pytestmark = pytest.mark.slow
SECTIONS = ("topology", "watermarks", "health", "fuse-heatmap", "rates", "decisions")


def chromium() -> str:
    found = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium",
                              shutil.which("chromium-browser")) if p and Path(p).exists()), None)
    if found is None:
        pytest.skip("no chromium binary (make installs Debian's chromium)")
    return found


@contextlib.asynccontextmanager
async def browser_page(errors: list[str]) -> AsyncIterator[object]:
    """A page of a headless Chromium; console errors and page errors land in ``errors``."""
    async_api = pytest.importorskip("playwright.async_api")
    async with async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium(), headless=True,
                                           args=["--no-sandbox", "--disable-gpu"])
        page = await browser.new_page(viewport={"width": 1366, "height": 900},
                                      locale="zh-CN")
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            yield page
        finally:
            await browser.close()


async def section_text(page, name: str) -> str:
    return await page.locator(f'[data-testid="{name}"]').inner_text()


async def test_no_data_states_are_never_blank(tmp_path):
    chromium()
    cfg = make_config([{"id": "lonely", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    errors: list[str] = []
    async with aiohttp.ClientSession() as session:
        rt = wire(cfg, make_backends(cfg, {}), session)
        async with serve_in_background(create_app(cfg, runtime=rt)) as url, \
                browser_page(errors) as page:
            await page.goto(f"{url}/dashboard")
            await page.wait_for_selector('[data-testid="topology"] [data-backend="lonely"]')
            await page.wait_for_function("document.querySelector('[data-testid=rates]')"
                                         ".innerText.includes('requests / s')", timeout=15000)
            texts = {s: await section_text(page, s) for s in SECTIONS}
            await page.screenshot(path=str(tmp_path / "empty.png"), full_page=True)
    assert "no engine signals yet" in texts["watermarks"]
    assert "no handoffs in the last 24 hours" in texts["fuse-heatmap"]
    assert "no requests yet" in texts["decisions"]
    assert "拓扑" in texts["topology"] and "no metrics" in texts["health"]
    assert all(len(t.splitlines()) >= 2 for t in texts.values()), texts
    assert not errors, errors


async def test_every_section_shows_live_data_in_chromium(tmp_path):
    chromium()
    errors: list[str] = []
    async with observed_router() as (_, url), browser_page(errors) as page:
        handed = await send_traffic(url)
        assert handed
        await page.goto(f"{url}/dashboard")
        trickle = asyncio.create_task(keep_sending(url))
        try:
            for figure in ("rps", "ttft-p95"):
                await page.wait_for_function(
                    f"Number(document.querySelector('[data-testid={figure}]')?.dataset.value)"
                    " > 0", timeout=20000)
        finally:
            trickle.cancel()
        for backend in ("cutter", "steady"):
            await page.wait_for_selector(f'[data-testid="topology"] [data-backend="{backend}"]')
            await page.wait_for_selector(f'[data-testid="watermarks"] tr[data-backend="{backend}"]'
                                         ' td[data-scorer]')
        cell = page.locator('[data-testid="fuse-heatmap"] rect[data-backend="cutter"]'
                            ':not([data-count="0"])')
        count = int(await cell.first.get_attribute("data-count"))
        kv = await page.locator('[data-testid="watermarks"] tr[data-backend="steady"] '
                                'td[data-signal="kv_cache_usage"]').inner_text()
        row = page.locator(f'[data-testid="decisions"] tr[data-request-id="{handed[0]}"]')
        await row.click()
        await page.wait_for_selector('[data-testid="trace"] tr[data-step="handoff"]')
        trace = await page.locator('[data-testid="trace"]').inner_text()
        await page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
    assert count >= 1 and kv == "0.70"
    assert handed[0] in trace and "attempt" in trace and "anchor" in trace
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    assert not errors, errors


async def test_the_health_row_shows_a_dark_a_hot_and_a_demoted_backend(tmp_path):
    chromium()
    errors: list[str] = []
    async with observed_router() as (rt, url), browser_page(errors) as page:
        now = rt.clock()
        rt.healing.tracker.record([Answer("cutter", now, "handoff"),  # half melt: a cut
                                   Answer("cutter", now, None, 1.2)] * 15
                                  + [Answer("steady", now, None, 1.2)] * 30)
        assert [m.new.value for m in rt.healing.tick()] == ["cut"]
        rt.signals.record_ok("steady", EngineSignals(now, "dcgm", gpu_temp_c=84.0), now)
        rt.signals.record_failure("cutter", "GET http://…/metrics: refused", now)
        await page.goto(f"{url}/dashboard")
        cut = '[data-testid="health"] tr[data-backend="cutter"][data-quality="cut"]'
        await page.wait_for_selector(cut + '[data-dark="true"]')
        hot = await page.locator('[data-testid="health"] tr[data-backend="steady"] '
                                 'td[data-cell="hot"]').inner_text()
        temp = await page.locator('[data-testid="health"] tr[data-backend="steady"] '
                                  'td[data-cell="temp"]').inner_text()
        text = await section_text(page, "health")
        await page.screenshot(path=str(tmp_path / "health.png"), full_page=True)
    assert hot == "hot: held out" and temp == "84"
    assert "the router is blind to cutter" in text and "0.25" in text
    assert not errors, errors


async def keep_sending(url: str) -> None:
    """A streamed request every 0.2 s until cancelled, so two polls see the counters move."""
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while True:
            await client.post("/v1/chat/completions", json=body)
            await asyncio.sleep(0.2)
