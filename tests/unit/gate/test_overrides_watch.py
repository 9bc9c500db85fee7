"""The config watcher on a real file: atomic-rename saves (``os.replace``) seen every time,
and one log line naming what was applied and what needs a restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from llmroute.config import parse_config
from llmroute.gate.intents import INTENTS
from llmroute.gate.overrides import RuleOverrides, config_changes

BASE = """\
pools: {general: {}}
backends: [{id: a, pool: general, engine: vllm, base_url: "http://127.0.0.1:9"}]
routing: {default_pool: general}
"""


def yaml(rule: str, extra: str = "") -> str:
    return BASE + f"gate: {{rules: {{code: ['{rule}']}}}}\n" + extra


def save_atomically(path: Path, text: str) -> None:
    """As editors and ConfigMaps do: write a temporary file, rename it over the old one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def until(ok: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    for _ in range(int(timeout_s / 0.05)):
        if ok():
            return True
        await asyncio.sleep(0.05)
    return ok()


@contextlib.asynccontextmanager
async def watching(path: Path) -> AsyncIterator[tuple[RuleOverrides, list[dict[str, Any]]]]:
    rules = RuleOverrides({"code": ["kubernetes"]}, INTENTS)
    stop = asyncio.Event()
    with capture_logs() as logs:
        task = asyncio.create_task(rules.watch(path, stop=stop))
        await asyncio.sleep(0.3)  # the watch is armed
        try:
            yield rules, logs
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)


def events(logs: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in logs if e["event"].startswith("config_")]


async def test_two_atomic_rename_saves_in_a_row_are_both_applied(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    async with watching(path) as (rules, logs):
        save_atomically(path, yaml("terraform"))
        assert await until(lambda: rules.reloads == 1)
        assert rules.match("terraform plan") == "code" and rules.match("kubernetes") is None
        save_atomically(path, yaml("ansible"))
        assert await until(lambda: rules.reloads == 2)
        assert rules.match("ansible playbook") == "code" and rules.match("terraform") is None
    reloaded = [e for e in logs if e["event"] == "config_reloaded"]
    assert len(reloaded) == 2
    assert reloaded[0]["applied"] == ["gate.rules"] and reloaded[0]["needs_restart"] == []


async def test_settings_that_are_not_applied_are_named_not_reported_as_reloaded(
        tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    async with watching(path) as (rules, logs):
        save_atomically(path, yaml("kubernetes", "timeouts: {ttft_s: 3}\n"))
        assert await until(lambda: "config_change_needs_restart" in events(logs))
        save_atomically(path, yaml("helm", "timeouts: {ttft_s: 3}\nretry: {max_attempts: 1}\n"))
        assert await until(lambda: rules.reloads == 1)
    assert events(logs) == ["config_change_needs_restart", "config_reloaded"]
    first, second = [e for e in logs if e["event"].startswith("config_")]
    assert first["needs_restart"] == ["timeouts"] and first["applied"] == []
    assert second["applied"] == ["gate.rules"] and second["needs_restart"] == ["retry"]


async def test_a_backend_change_is_named_as_waiting_for_a_reload_not_a_restart(
        tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    moved = BASE.replace("127.0.0.1:9", "127.0.0.1:10")
    async with watching(path) as (rules, logs):
        save_atomically(path, moved + "gate: {rules: {code: ['kubernetes']}}\n")
        assert await until(lambda: "config_change_needs_reload" in events(logs))
        save_atomically(path, moved + "gate: {rules: {code: ['kubernetes']}}\n"
                        "timeouts: {ttft_s: 3}\nrouting: {default_pool: general, "
                        "cross_pool_fallback: true}\n")
        assert await until(lambda: "config_change_needs_restart" in events(logs))
    first, second = [e for e in logs if e["event"].startswith("config_")]
    assert first["needs_reload"] == ["backends"] and first["needs_restart"] == []
    assert second["needs_reload"] == ["routing"] and second["needs_restart"] == ["timeouts"]
    assert rules.reloads == 0


async def test_an_invalid_save_keeps_the_rules_and_the_next_good_one_applies(
        tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    async with watching(path) as (rules, logs):
        save_atomically(path, BASE + "gate: {rules: {nope: ['x']}}\n")
        assert await until(lambda: "config_not_reloaded" in events(logs))
        assert rules.match("kubernetes") == "code" and rules.reloads == 0
        path.write_text(yaml("kubernetes"))  # a plain in-place write, back to the start
        save_atomically(path, yaml("docker"))
        assert await until(lambda: rules.reloads == 1)
    assert rules.match("docker compose") == "code"
    assert "unknown intent" in next(e["error"] for e in logs
                                    if e["event"] == "config_not_reloaded")


async def test_a_save_with_the_same_content_logs_nothing(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(yaml("kubernetes"))
    async with watching(path) as (rules, logs):
        save_atomically(path, yaml("kubernetes"))
        (tmp_path / "other.yaml").write_text("unrelated")
        await asyncio.sleep(0.6)
    assert events(logs) == [] and rules.reloads == 0


def test_config_changes_names_sections_and_gate_fields() -> None:
    old = parse_config(yaml("kubernetes"), "old")
    new = parse_config(BASE + "gate: {rules: {code: ['helm']}, cache_ttl_s: 5}\n"
                       "timeouts: {ttft_s: 2}\n", "new")
    assert config_changes(old, new) == ["timeouts", "gate.rules", "gate.cache_ttl_s"]
    assert config_changes(old, parse_config(yaml("kubernetes"), "elsewhere")) == []


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
    async with watching(path) as (rules, _):
        configmap_version(tmp_path, "v2", yaml("terraform"))
        assert await until(lambda: rules.reloads == 1)
        configmap_version(tmp_path, "v3", yaml("ansible"))
        assert await until(lambda: rules.reloads == 2)
    assert rules.match("ansible") == "code" and rules.match("terraform") is None
