"""``llmroute demo``: start engines and the router in this process, serve it on loopback,
and send the conversations through it over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from rich.console import Console

from llmroute.api.app import create_app
from llmroute.assemble.runtime import Progress, open_runtime
from llmroute.config import Config
from llmroute.demo import show
from llmroute.demo.prompts import Conversation, builtin, load_jsonl
from llmroute.demo.runner import Row, run_conversation
from llmroute.api.server import serve_in_background


async def run_demo(config: Config, prompts: Path | None, *, max_tokens: int = 128,
                   concurrency: int = 3, console: Console | None = None) -> int:
    """Run the demo; returns the exit code (0 when every request got an answer)."""
    console = console or Console()
    conversations = load_jsonl(prompts) if prompts else builtin()
    async with contextlib.AsyncExitStack() as stack:
        with show.startup_bar(console) as progress:
            url = await stack.enter_async_context(_serve(config, progress))
        rows = await _send_all(url, conversations, max_tokens, concurrency, console)
    show.summary(console, rows)
    return 0 if rows and all(r.ok for r in rows) else 1


@contextlib.asynccontextmanager
async def _serve(config: Config, progress: Progress) -> AsyncIterator[str]:
    """Start engines (EngineError propagates), then serve the router on a free port."""
    async with open_runtime(config, progress) as rt:
        async with serve_in_background(create_app(config, runtime=rt)) as url:
            yield url


async def _send_all(url: str, conversations: list[Conversation], max_tokens: int,
                    concurrency: int, console: Console) -> list[Row]:
    rows: list[Row] = []
    gate = asyncio.Semaphore(concurrency)
    show.header(console)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async def one(conv: Conversation) -> None:
            async with gate:
                async for row in run_conversation(session, url, conv, max_tokens):
                    rows.append(row)
                    console.print(show.row_line(row), markup=False, highlight=False,
                                  soft_wrap=True)
        await asyncio.gather(*(one(c) for c in conversations))
    return rows
