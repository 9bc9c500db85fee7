"""The answer stages: their order, built by the composition root from what is configured, and
the contract through the app (httpx.ASGITransport) over a scripted upstream on loopback: a
stage that answers early is wrapped by the stages before it only, and a failure gives back
what every stage holds."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from fakes.router import make_config, open_router
from fakes.upstream import Upstream, serve_upstream

from llmroute.assemble.runtime import make_backends, wire
from llmroute.errors import NoBackendAvailable
from llmroute.flow.call import Call
from llmroute.runtime import Runtime
from llmroute.types import Routed

CHAT = "/v1/chat/completions"
ADMIN_ENV = "LLMROUTE_TEST_STAGES_ADMIN"
PRIORITY = {"classes": [{"name": "standard", "ttft_target_s": 5}],
            "watermarks": {"in_flight": 4}}


def parts(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Each part that brings a built-in stage, as a config section."""
    (tmp_path / "words.txt").write_text("forbidden\n", encoding="utf-8")
    (tmp_path / "strategies").mkdir(exist_ok=True)
    return {
        "auth": {"enabled": True, "keys_path": str(tmp_path / "keys.db"),
                 "admin_key_env": ADMIN_ENV},
        "priority": PRIORITY,
        "strategies": {"dir": str(tmp_path / "strategies"), "watch": False},
        "content_filter": {"watch": False, "lists": [
            {"name": "w", "path": str(tmp_path / "words.txt"), "action": "mask"}]},
        "cache": {"enabled": True},
    }


@pytest.mark.parametrize(("sections", "order"), [
    ((), []),
    (("auth",), ["UsageMeter"]),
    (("priority",), ["PrioritySlot"]),
    (("strategies",), ["TrialTiming"]),
    (("content_filter",), ["OutputFilter"]),
    (("cache",), ["CachedAnswer"]),
    (("content_filter", "strategies", "priority", "auth"),
     ["UsageMeter", "PrioritySlot", "TrialTiming", "OutputFilter"]),
    (("content_filter", "cache", "strategies", "priority", "auth"),
     ["UsageMeter", "PrioritySlot", "CachedAnswer", "TrialTiming", "OutputFilter"]),
])
async def test_the_stage_order_is_one_tuple_of_what_is_configured(tmp_path, monkeypatch,
                                                                  sections, order):
    monkeypatch.setenv(ADMIN_ENV, "admin-key-for-tests")
    chosen = {name: section for name, section in parts(tmp_path).items() if name in sections}
    cfg = make_config([{"id": "a", "pool": "general", "base_url": "http://127.0.0.1:9"}],
                      gate={"kind": "off"}, **chosen)
    async with aiohttp.ClientSession() as session:
        rt = wire(cfg, make_backends(cfg, {}), session)
        try:
            assert [type(s).__name__ for s in rt.stages] == order
        finally:
            if rt.policy is not None:
                rt.policy.keys.close()


class Probe:
    """A stage that notes every hook it runs in ``seen`` and, when told, answers early or
    fails before the answer."""

    def __init__(self, seen: list[str], name: str, early: Routed | None = None,
                 fail: bool = False):
        self.seen, self.name, self.early, self.fail = seen, name, early, fail

    async def before(self, call: Call) -> Routed | None:
        self.seen.append(f"{self.name}.before")
        if self.fail:
            raise NoBackendAvailable("the probe refuses")
        return self.early

    async def after(self, call: Call, routed: Routed) -> Routed:
        self.seen.append(f"{self.name}.after")
        return Routed({**routed.headers, f"x-probe-{self.name}": "1"}, routed.body,
                      routed.stream)

    async def failed(self, call: Call, err: BaseException) -> None:
        self.seen.append(f"{self.name}.failed:{type(err).__name__}")


@contextlib.asynccontextmanager
async def staged(tmp_path: Path, *probes: Probe
                 ) -> AsyncIterator[tuple[Runtime, httpx.AsyncClient, Upstream]]:
    """A router with a priority class and a word list (``forbidden`` masked), the probes
    inserted after its PrioritySlot, before its OutputFilter."""
    async with serve_upstream(["ok"]) as up:
        section = parts(tmp_path)
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          gate={"kind": "off"}, priority=PRIORITY,
                          content_filter=section["content_filter"])
        async with open_router(cfg) as (rt, client):
            slot, screen = rt.stages
            rt.stages = (slot, *probes, screen)
            yield rt, client, up


def chat(stream: bool = False) -> dict[str, Any]:
    return {"model": "auto", "stream": stream,
            "messages": [{"role": "user", "content": "hi"}]}


ANSWER = {"id": "chatcmpl-early", "object": "chat.completion", "model": "auto",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": "a forbidden word"}}]}


async def test_an_early_answer_passes_only_the_stages_before_it(tmp_path):
    seen: list[str] = []
    early = Probe(seen, "early", Routed({"x-request-id": "early"}, body=ANSWER))
    async with staged(tmp_path, Probe(seen, "outer"), early, Probe(seen, "inner")) as (
            rt, client, up):
        answer = await client.post(CHAT, json=chat())
        assert rt.priority is not None and rt.priority.active == 0  # the place given back
    assert answer.status_code == 200 and up.requests == []  # no engine asked
    assert seen == ["outer.before", "early.before", "outer.after"]
    assert answer.headers["x-probe-outer"] == "1" and "x-probe-early" not in answer.headers
    assert answer.headers["x-llmroute-priority"] == "standard"  # the slot, outside it
    # the output filter stands inside the early stage: the early answer passes unfiltered
    assert answer.json()["choices"][0]["message"]["content"] == "a forbidden word"


async def test_the_afters_run_innermost_first_around_the_engines_answer(tmp_path):
    seen: list[str] = []
    async with staged(tmp_path, Probe(seen, "outer"), Probe(seen, "inner")) as (_, client,
                                                                             up):
        answer = await client.post(CHAT, json=chat(stream=True))
    assert answer.status_code == 200 and "[DONE]" in answer.text and len(up.requests) == 1
    assert seen == ["outer.before", "inner.before", "inner.after", "outer.after"]


async def test_a_failure_after_admission_reaches_every_stage_innermost_first(tmp_path):
    seen: list[str] = []
    async with staged(tmp_path, Probe(seen, "outer"), Probe(seen, "refuses", fail=True),
                      Probe(seen, "inner")) as (rt, client, up):
        answer = await client.post(CHAT, json=chat())
        assert rt.priority is not None and rt.priority.active == 0
    assert answer.status_code == 503 and up.requests == []
    assert seen == ["outer.before", "refuses.before", "inner.failed:NoBackendAvailable",
                    "refuses.failed:NoBackendAvailable", "outer.failed:NoBackendAvailable"]
