"""The real router over real local llama.cpp engines, served on loopback, for integration
tests. Without engines the test is skipped locally and fails in CI (``CI`` set)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import pytest

from llmroute.api.app import create_app
from llmroute.config import parse_config
from llmroute.errors import EngineError
from llmroute.assemble.runtime import open_runtime
from llmroute.runtime import Runtime
from llmroute.api.server import serve_in_background


def skip_or_fail(reason: str) -> None:
    """Skip the test, unless CI is set: then fail it (engines must work in CI)."""
    if os.environ.get("CI", "").lower() in ("", "0", "false", "no"):
        pytest.skip(reason)
    pytest.fail(f"{reason} (CI is set, so this must work)")


@contextlib.asynccontextmanager
async def real_router(config_yaml: str, name: str) -> AsyncIterator[tuple[Runtime, str]]:
    """Start the engines of ``config_yaml`` and serve the router; yields ``(runtime, url)``."""
    config = parse_config(config_yaml, name)
    async with contextlib.AsyncExitStack() as stack:
        try:
            rt = await stack.enter_async_context(open_runtime(config))
        except EngineError as err:
            skip_or_fail(f"local engines are not available: {err.message}")
        url = await stack.enter_async_context(
            serve_in_background(create_app(config, runtime=rt)))
        yield rt, url
