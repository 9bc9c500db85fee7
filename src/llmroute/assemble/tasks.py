"""``running(coro)``: a background task for as long as a block runs (the file watchers)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def running(coro: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run ``coro`` as a task while the block runs; cancel it (and wait for it) on exit."""
    task = asyncio.create_task(coro)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
