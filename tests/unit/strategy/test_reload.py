"""Hot reload over real files: a higher version applies, an equal or lower one is refused,
a broken file keeps the old set, a removed file retires its strategy, and a request keeps
the set it matched against. One test runs the real watcher (``assemble/watch.py``, watchfiles)."""

from __future__ import annotations

import asyncio
import os

from fakes.clock import FakeClock
from prometheus_client import CollectorRegistry

from llmroute.assemble.watch import strategy_files
from llmroute.strategy.book import StrategyBook
from llmroute.types import ChatRequest, Intent

REQ = ChatRequest("chat", {}, "auto", False, "hello", 2, None, "r")
CHAT = Intent("chat", 0.9)


def book_of(loader, folder, clock=None, registry=None) -> StrategyBook:
    return StrategyBook(loader.load_dir(folder), lambda: loader.load_dir(folder),
                        clock or FakeClock(1000.0), registry, str(folder))


def count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_a_higher_version_applies_and_the_request_keeps_its_set(
        loader, write, tmp_path, strategy_yaml):
    write("a.yaml", strategy_yaml("a", version=1, pool="long"))
    clock = FakeClock(1000.0)
    book = book_of(loader, tmp_path, clock)
    in_flight = book.choose(REQ, CHAT)
    write("a.yaml", strategy_yaml("a", version=2, pool="code"))
    clock.advance(5)
    status = await book.reload()
    assert (status.outcome, status.applied, status.at) == ("applied", ("a@2",), 1005.0)
    now = book.choose(REQ, CHAT)
    assert (now.header, now.plan.pool) == ("a@2", "code")
    assert (in_flight.header, in_flight.plan.pool) == ("a@1", "long")
    assert in_flight.snapshot.get("a").header == "a@1"  # the old set lives on with it


async def test_an_equal_or_lower_version_is_refused_logged_and_counted(
        loader, write, tmp_path, strategy_yaml):
    write("a.yaml", strategy_yaml("a", version=3, pool="long"))
    write("b.yaml", strategy_yaml("b", version=1, pool="long"))
    registry = CollectorRegistry()
    book = book_of(loader, tmp_path, registry=registry)
    write("a.yaml", strategy_yaml("a", version=3, pool="code"))
    write("b.yaml", strategy_yaml("b", version=2, pool="code"))
    status = await book.reload()
    assert status.outcome == "applied" and status.applied == ("b@2",)
    assert len(status.refused) == 1
    assert status.refused[0].startswith(f"{tmp_path}/a.yaml:2: version: version 3 is not "
                                        "higher than the loaded a@3")
    assert book.current.get("a").spec.pool == "long"
    write("a.yaml", strategy_yaml("a", version=2, pool="code"))
    assert (await book.reload()).outcome == "refused"
    assert count(registry, "llmroute_strategy_stale_versions_total", strategy="a") == 2
    assert count(registry, "llmroute_strategy_reloads_total", outcome="refused") == 1


async def test_a_broken_file_keeps_the_old_set_and_says_where(loader, write, tmp_path,
                                                               strategy_yaml):
    write("a.yaml", strategy_yaml("a", version=1))
    registry = CollectorRegistry()
    book = book_of(loader, tmp_path, registry=registry)
    before = book.current
    write("a.yaml", strategy_yaml("a", version=2, extra="surprise: 1\n"))
    status = await book.reload()
    assert status.outcome == "invalid" and book.current is before
    assert status.messages == (f"{tmp_path}/a.yaml:7: surprise: Extra inputs are not "
                               "permitted",)
    assert count(registry, "llmroute_strategy_reloads_total", outcome="invalid") == 1


async def test_a_removed_file_retires_its_strategy_and_unchanged_is_a_no_op(
        loader, write, tmp_path, strategy_yaml):
    write("a.yaml", strategy_yaml("a"))
    gone = write("b.yaml", strategy_yaml("b", priority=9))
    book = book_of(loader, tmp_path)
    held = book.choose(REQ, CHAT)
    assert (await book.reload()).outcome == "unchanged"
    gone.unlink()
    status = await book.reload()
    assert (status.outcome, status.retired) == ("applied", ("b@1",))
    assert book.choose(REQ, CHAT).header == "a@1" and held.header == "b@1"


async def test_the_watcher_applies_an_edit_and_refuses_a_broken_file(
        loader, write, tmp_path, strategy_yaml):
    first = strategy_yaml("a", version=1)
    write("a.yaml", first)
    book = book_of(loader, tmp_path)
    stop = asyncio.Event()
    task = asyncio.create_task(strategy_files(book, tmp_path, debounce_ms=50, stop=stop))
    try:
        loaded = book.status
        for _ in range(100):  # the same file saved again until the watcher reloads it: armed
            write("a.yaml", first)
            if await _seen(lambda: book.status is not loaded):
                break
        assert book.status.outcome == "unchanged"
        write("a.yaml", strategy_yaml("a", version=2))
        await _until(lambda: book.current.get("a").header == "a@2")
        write("a.yaml", "strategy_id: a\nversion: [\n")
        await _until(lambda: book.status.outcome == "invalid")
        assert book.current.get("a").header == "a@2"
        assert "a.yaml:" in book.status.messages[0]
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


def configmap_version(root, version: str, text: str) -> None:
    """Kubernetes' ConfigMap volume update: a new ``..VERSION`` folder holding ``a.yaml``,
    then an atomic swap of the ``..data`` link to it (``a.yaml`` is a link through it)."""
    folder = root / f"..{version}"
    folder.mkdir()
    (folder / "a.yaml").write_text(text, encoding="utf-8")
    (root / "..data_tmp").symlink_to(folder.name)
    os.replace(root / "..data_tmp", root / "..data")


async def test_a_configmap_update_of_the_folder_is_seen(loader, tmp_path, strategy_yaml):
    """The folder a ConfigMap is mounted at changes no ``*.yaml`` entry of its own (they
    are links through ``..data``): the ``..data`` swap is what the watcher sees."""
    configmap_version(tmp_path, "v1", strategy_yaml("a", version=1))
    (tmp_path / "a.yaml").symlink_to("..data/a.yaml")
    book = book_of(loader, tmp_path)
    stop = asyncio.Event()
    task = asyncio.create_task(strategy_files(book, tmp_path, debounce_ms=50, stop=stop))
    try:
        loaded = book.status
        for i in range(100):  # the same file in a new version until the watcher reloads: armed
            configmap_version(tmp_path, f"p{i}", strategy_yaml("a", version=1))
            if await _seen(lambda: book.status is not loaded):
                break
        configmap_version(tmp_path, "v2", strategy_yaml("a", version=2, pool="code"))
        await _until(lambda: book.current.get("a").header == "a@2")
        assert book.current.get("a").spec.pool == "code"
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def _seen(done, timeout_s: float = 0.1) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not done() and loop.time() < deadline:
        await asyncio.sleep(0.02)
    return done()


async def _until(done, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not done():
        assert loop.time() < deadline, "the watcher did not reload in time"
        await asyncio.sleep(0.05)
