"""The config file's watcher on real files and a real watchfiles: atomic-rename saves
(``os.replace``) and ConfigMap link swaps are seen every time, whatever ``gate.kind`` is;
``gate.rules`` is applied at once and one log line names what was applied, what waits for
a reload and what needs a restart; and the one config diff."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fakes.router import make_config
from structlog.testing import capture_logs

from llmroute.api.wire import parse_chat
from llmroute.assemble.runtime import open_runtime
from llmroute.assemble.watch import ConfigWatch, config_diff, config_file
from llmroute.config import GateConfig, load_config, parse_config
from llmroute.gate.protocol import Gate
from llmroute.gate.rules import RulesGate
from llmroute.gate.semantic import SemanticGate

BASE = """\
pools: {general: {}}
backends: [{id: a, pool: general, engine: vllm, base_url: "http://127.0.0.1:9"}]
routing: {default_pool: general}
"""


def yaml(rule: str, extra: str = "", kind: str = "rules") -> str:
    return BASE + f"gate: {{kind: {kind}, rules: {{code: ['{rule}']}}}}\n" + extra


def save_atomically(path: Path, text: str) -> None:
    """As editors and ConfigMaps do: write a temporary file, rename it over the old one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def until(ok: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not ok() and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return ok()


async def armed(poke: Callable[[int], None], seen: Callable[[], bool]) -> None:
    """Poke the watched folder (a save that changes no setting) until the watcher has
    seen an event: from then on it is armed."""
    for i in range(100):
        poke(i)
        if await until(seen, 0.1):
            return
    raise AssertionError("the watcher never saw a change")


def comment(path: Path) -> Callable[[int], None]:
    """A poke: save ``path`` again with one more comment line."""
    return lambda i: save_atomically(path, path.read_text() + f"# armed {i}\n")


async def label(gate: Gate, text: str) -> str:
    request = parse_chat({"model": "auto", "messages": [{"role": "user", "content": text}]},
                         "r")
    return (await gate.classify(request)).label


@contextlib.asynccontextmanager
async def watching(path: Path, gate: Gate | None = None,
                   poke: Callable[[int], None] | None = None
                   ) -> AsyncIterator[tuple[ConfigWatch, list[dict[str, Any]]]]:
    watch = ConfigWatch(path, gate or RulesGate({"code": ["kubernetes"]}))
    stop = asyncio.Event()
    with capture_logs() as logs:
        task = asyncio.create_task(watch.run(debounce_ms=50, stop=stop))
        await armed(poke or comment(path), lambda: watch.bursts > 0)
        try:
            yield watch, logs
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)


def events(logs: list[dict[str, Any]]) -> list[str]:
    """The watcher's lines above debug (a save that changes nothing is logged at debug)."""
    return [e["event"] for e in logs
            if e["event"].startswith("config_") and e["log_level"] != "debug"]


def lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] in events(logs)]


async def test_two_atomic_rename_saves_in_a_row_are_both_applied(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    async with watching(path) as (watch, logs):
        save_atomically(path, yaml("terraform"))
        assert await until(lambda: watch.reloads == 1)
        assert await label(watch.gate, "terraform plan") == "code"
        assert await label(watch.gate, "kubernetes") != "code"
        save_atomically(path, yaml("ansible"))
        assert await until(lambda: watch.reloads == 2)
        assert await label(watch.gate, "ansible playbook") == "code"
        assert await label(watch.gate, "terraform plan") != "code"
    reloaded = [e for e in logs if e["event"] == "config_reloaded"]
    assert len(reloaded) == 2
    assert reloaded[0]["applied"] == ["gate.rules"] and reloaded[0]["needs_restart"] == []


async def test_the_semantic_gate_gets_the_saved_rules_too(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes", kind="semantic"))
    gate = SemanticGate(GateConfig(rules={"code": ["kubernetes"]}))  # not started: no model
    async with watching(path, gate) as (watch, _):
        path.write_text(BASE + "gate: {rules: {tool_call: ['\\bRFC ?\\d+']}}\n")  # in place
        assert await until(lambda: watch.reloads == 1)
    assert gate.overrides.match("see RFC 9110") == "tool_call"
    assert gate.overrides.match("kubernetes") is None


async def test_settings_that_are_not_applied_are_named_not_reported_as_reloaded(
        tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    async with watching(path) as (watch, logs):
        save_atomically(path, yaml("kubernetes", "timeouts: {ttft_s: 3}\n"))
        assert await until(lambda: "config_change_needs_restart" in events(logs))
        save_atomically(path, yaml("helm", "timeouts: {ttft_s: 3}\nretry: {max_attempts: 1}\n"))
        assert await until(lambda: watch.reloads == 1)
    assert events(logs) == ["config_change_needs_restart", "config_reloaded"]
    first, second = lines(logs)
    assert first["needs_restart"] == ["timeouts"] and first["applied"] == []
    assert second["applied"] == ["gate.rules"] and second["needs_restart"] == ["retry"]


async def test_a_backend_change_is_named_as_waiting_for_a_reload_not_a_restart(
        tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    moved = BASE.replace("127.0.0.1:9", "127.0.0.1:10")
    rules = "gate: {kind: rules, rules: {code: ['kubernetes']}}\n"
    async with watching(path) as (watch, logs):
        save_atomically(path, moved + rules)
        assert await until(lambda: "config_change_needs_reload" in events(logs))
        save_atomically(path, moved + rules + "timeouts: {ttft_s: 3}\nrouting: "
                        "{default_pool: general, cross_pool_fallback: true}\n")
        assert await until(lambda: "config_change_needs_restart" in events(logs))
    first, second = lines(logs)
    assert first["needs_reload"] == ["backends"] and first["needs_restart"] == []
    assert second["needs_reload"] == ["routing"] and second["needs_restart"] == ["timeouts"]
    assert watch.reloads == 0


async def test_an_invalid_save_keeps_the_rules_and_the_next_good_one_applies(
        tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    async with watching(path) as (watch, logs):
        save_atomically(path, BASE + "gate: {kind: rules, rules: {nope: ['x']}}\n")
        assert await until(lambda: "config_not_reloaded" in events(logs))
        assert await label(watch.gate, "kubernetes") == "code" and watch.reloads == 0
        path.write_text(yaml("kubernetes"))  # a plain in-place write, back to the start
        save_atomically(path, yaml("docker"))
        assert await until(lambda: watch.reloads == 1)
    assert await label(watch.gate, "docker compose") == "code"
    assert "unknown intent" in next(e["error"] for e in logs
                                    if e["event"] == "config_not_reloaded")


async def test_a_save_with_the_same_content_logs_nothing(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    async with watching(path) as (watch, logs):
        seen = watch.bursts
        save_atomically(path, path.read_text())
        (tmp_path / "other.yaml").write_text("unrelated")
        assert await until(lambda: watch.bursts > seen)
    assert events(logs) == [] and watch.reloads == 0


def test_config_diff_names_sections_and_gate_fields() -> None:
    old = parse_config(yaml("kubernetes"), "old")
    new = parse_config(BASE + "gate: {kind: rules, rules: {code: ['helm']}, cache_ttl_s: 5}\n"
                       "timeouts: {ttft_s: 2}\n", "new")
    assert config_diff(old, new) == ["timeouts", "gate.rules", "gate.cache_ttl_s"]
    assert config_diff(old, parse_config(yaml("kubernetes"), "elsewhere")) == []


def configmap_version(root: Path, version: str, text: str) -> None:
    """Kubernetes' ConfigMap volume update: a new ``..VERSION`` folder, then an atomic swap
    of the ``..data`` link to it (``router.yaml`` is a link through ``..data``)."""
    folder = root / f"..{version}"
    folder.mkdir()
    (folder / "router.yaml").write_text(text)
    tmp = root / "..data_tmp"
    tmp.symlink_to(folder.name)
    os.replace(tmp, root / "..data")


async def test_configmap_link_swaps_are_seen_every_time(tmp_path: Path) -> None:
    configmap_version(tmp_path, "v1", yaml("kubernetes"))
    path = tmp_path / "router.yaml"
    path.symlink_to("..data/router.yaml")

    def poke(i: int) -> None:
        configmap_version(tmp_path, f"p{i}", yaml("kubernetes", f"# {i}\n"))

    async with watching(path, poke=poke) as (watch, _):
        configmap_version(tmp_path, "v2", yaml("terraform"))
        assert await until(lambda: watch.reloads == 1)
        configmap_version(tmp_path, "v3", yaml("ansible"))
        assert await until(lambda: watch.reloads == 2)
    assert await label(watch.gate, "ansible playbook") == "code"
    assert await label(watch.gate, "terraform plan") != "code"


async def test_a_saved_config_is_noticed_by_a_router_with_the_rules_gate(
        tmp_path: Path) -> None:
    """The router as ``llmroute serve`` opens it (``open_runtime``) from a file, with
    ``gate.kind: rules``: a saved ``gate.rules`` is applied, a saved ``timeouts`` logged as
    needing a restart."""
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    with capture_logs() as logs:
        async with open_runtime(load_config(path)) as rt:
            assert isinstance(rt.gate, RulesGate)
            await armed(lambda i: save_atomically(path, yaml(f"probe{i}")),
                        lambda: "config_reloaded" in events(logs))
            save_atomically(path, yaml("terraform", "timeouts: {ttft_s: 3}\n"))
            assert await until(lambda: any(e["needs_restart"] for e in lines(logs)))
            assert await label(rt.gate, "terraform plan") == "code"
            assert await label(rt.gate, "kubernetes") != "code"
    line = lines(logs)[-1]
    assert line["event"] == "config_reloaded"
    assert line["applied"] == ["gate.rules"] and line["needs_restart"] == ["timeouts"]


def test_only_a_config_read_from_a_file_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    assert config_file(load_config(path)) == path
    built = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}])
    assert config_file(built) is None
    assert config_file(load_config(None)) is None  # the embedded default
