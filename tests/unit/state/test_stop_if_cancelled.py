"""``state.guard.stop_if_cancelled``: a background loop stops on ``cancel`` even when the
call it was awaiting swallowed the cancellation (as a client library may, turning it into
an error the loop catches, or into a normal return)."""

from __future__ import annotations

import asyncio

import pytest

from llmroute.state.guard import stop_if_cancelled


async def _swallowing_call() -> None:
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        return


async def _swallowing_error() -> None:
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError as exc:
        raise ConnectionError("connection closed") from exc


@pytest.mark.parametrize("call", [_swallowing_call, _swallowing_error],
                         ids=["returns", "raises-connection-error"])
async def test_a_loop_whose_call_swallowed_the_cancel_still_stops(call):
    turns = 0

    async def loop() -> None:
        nonlocal turns
        while True:
            turns += 1
            try:
                await call()
            except ConnectionError as exc:
                stop_if_cancelled(exc)
            stop_if_cancelled()
            await asyncio.sleep(0.01)

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.05)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=2)
    assert task in done and task.cancelled() and turns == 1


async def test_outside_a_cancellation_it_does_nothing():
    stop_if_cancelled()
    stop_if_cancelled(ConnectionError("x"))
