"""Fuzz a real router with schemathesis: the router (uvicorn, auth on, a hand-off store) and a
scripted upstream run on loopback in a background thread; cases generated from the router's
own ``GET /openapi.json`` are sent over HTTP, and every answer is checked: no 500, every
4xx/5xx an OpenAI error body, and an answer within ``TIMEOUT_S`` (no hang)."""

from __future__ import annotations

import asyncio
import contextlib
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import hypothesis
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from fakes.clock import FakeClock
from fakes.router import make_config
from fakes.upstream import serve_upstream
from llmroute.api.app import create_app
from llmroute.api.server import serve_in_background
from llmroute.assemble.policy import build_policy
from llmroute.assemble.runtime import make_backends, wire
from llmroute.assemble.stages import answer_stages
from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Limits, Tenant

ADMIN = "sk-admin-fuzz"
TIMEOUT_S = 10.0
HUMAN = """\
    strategy_id: legal
    version: 1
    when: {keywords: [lawyer]}
    kind: human
    message: "A person will answer; ticket {ticket}."
    """


@dataclass
class FuzzStats:
    """What a fuzz run saw: ``cases`` sent, ``server_errors`` (500s), ``bad_bodies`` (a
    4xx/5xx whose body is not in its surface's error shape: Anthropic's on
    ``/v1/messages*``, else OpenAI's), ``hangs`` (no answer in TIMEOUT_S), the
    ``statuses`` seen per operation, and one curl line per finding."""

    cases: int = 0
    server_errors: int = 0
    bad_bodies: int = 0
    hangs: int = 0
    statuses: dict[str, dict[int, int]] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)


def openai_error(body: Any) -> bool:
    """Whether ``body`` is ``{"error": {message: str, type: str, param, code}}``."""
    err = body.get("error") if isinstance(body, dict) else None
    return (isinstance(err, dict) and {"message", "type", "param", "code"} <= err.keys()
            and isinstance(err["message"], str) and isinstance(err["type"], str))


def anthropic_error(body: Any) -> bool:
    """Whether ``body`` is ``{"type": "error", "error": {type: str, message: str}}``."""
    err = body.get("error") if isinstance(body, dict) else None
    return (body.get("type") == "error" and isinstance(err, dict)
            and isinstance(err.get("type"), str) and isinstance(err.get("message"), str))


def _check(stats: FuzzStats, case: Any, resp: requests.Response | None) -> None:
    stats.cases += 1
    if resp is None:
        stats.hangs += 1
        stats.findings.append(f"hang: {case.as_curl_command()}")
        return
    seen = stats.statuses.setdefault(f"{case.method} {case.path}", {})
    seen[resp.status_code] = seen.get(resp.status_code, 0) + 1
    if resp.status_code < 400:
        return
    shape = anthropic_error if case.path.startswith("/v1/messages") else openai_error
    try:
        shaped = shape(resp.json())
    except ValueError:
        shaped = False
    stats.server_errors += resp.status_code == 500
    stats.bad_bodies += not shaped
    if resp.status_code == 500 or not shaped:
        stats.findings.append(f"{resp.status_code} {resp.text[:200]!r}: "
                              f"{case.as_curl_command()}")


def fuzz(base_url: str, known: dict[str, list[str]], per_strategy: int,
         seed: int = 0) -> FuzzStats:
    """Send up to ``per_strategy`` generated cases per operation and generation mode
    (positive: schema-valid, negative: schema-violating) to the router at ``base_url``:
    ``/v1/*`` with the API key ``known["key"][0]``, the rest with the admin key. Every
    other positive case is steered to names the router knows (``known``: model, tenant,
    ticket, key_id), so it reaches past the not-found answers."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    stats = FuzzStats()
    with requests.Session() as session:
        for result in schema.get_all_operations():
            op = result.ok()
            secret = known["key"][0] if op.path.startswith("/v1/") else ADMIN
            auth = {"Authorization": f"Bearer {secret}"}
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _run(op.as_strategy(generation_mode=mode), per_strategy, seed,
                     lambda case, m=mode: _send(
                         _steer(case, known, stats.cases) if m is GenerationMode.POSITIVE
                         else case, base_url, session, auth, stats))
    return stats


def _run(strategy: Any, examples: int, seed: int, send: Any) -> None:
    @hypothesis.seed(seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def one(case: Any) -> None:
        send(case)

    with contextlib.suppress(Exception):  # an operation with nothing negative to generate
        one()


def _steer(case: Any, known: dict[str, list[str]], n: int) -> Any:
    """``case`` with, on every other call, its model/tenant and path ids replaced by
    known ones (chosen by ``n``)."""
    if n % 2:
        return case
    for name, value in (case.path_parameters or {}).items():
        if known.get(name) and isinstance(value, str):
            case.path_parameters[name] = known[name][n // 2 % len(known[name])]
    if isinstance(case.body, dict):
        for name in ("model", "tenant"):
            if name in case.body:
                case.body[name] = known[name][n // 2 % len(known[name])]
    return case


def _send(case: Any, base_url: str, session: requests.Session, auth: dict[str, str],
          stats: FuzzStats) -> None:
    headers = {**auth, **(case.headers or {})}
    try:
        resp = case.call(base_url=base_url, session=session, headers=headers,
                         timeout=TIMEOUT_S)
    except requests.Timeout:
        resp = None
    _check(stats, case, resp)


@contextlib.contextmanager
def serve_router(tmp: Path) -> Iterator[tuple[str, dict[str, list[str]]]]:
    """A router (auth on with the key ``ADMIN``, a ``human`` strategy and its hand-off
    store) over a scripted upstream, on loopback in a background thread; yields its
    base URL and the names it knows (``key``: API keys, ``key_id``, ``model``, ``tenant``,
    ``ticket``: open hand-off tickets)."""
    stop = threading.Event()
    ready = threading.Event()
    out: dict[str, Any] = {}

    def main() -> None:
        try:
            asyncio.run(_serve(tmp, out, ready, stop))
        except BaseException as exc:
            out["error"] = repr(exc)
            ready.set()
            raise

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(60) and "error" not in out, out.get("error")
    try:
        yield out["url"], out["known"]
    finally:
        stop.set()
        thread.join(30)


async def _ticket(session: aiohttp.ClientSession, url: str, key: str) -> str:
    """A new hand-off ticket's id (a chat request the ``legal`` strategy hands off)."""
    body = {"model": "auto", "messages": [{"role": "user", "content": "call a lawyer"}]}
    async with session.post(f"{url}/v1/chat/completions", json=body,
                            headers={"Authorization": f"Bearer {key}"}) as resp:
        return resp.headers["x-llmroute-ticket"]


async def _serve(tmp: Path, out: dict[str, Any], ready: threading.Event,
                 stop: threading.Event) -> None:
    folder = tmp / "strategies"
    folder.mkdir(exist_ok=True)
    (folder / "legal.yaml").write_text(textwrap.dedent(HUMAN), encoding="utf-8")
    async with serve_upstream(["ok"]) as up, aiohttp.ClientSession() as session:
        cfg = make_config(
            [{"id": "a", "pool": "general", "base_url": up.base_url}], gate={"kind": "rules"},
            strategies={"dir": str(folder), "watch": False,
                        "handoffs_path": str(tmp / "handoffs.db")},
            auth={"enabled": True, "keys_path": str(tmp / "keys.db"),
                  "admin_key_env": "FUZZ_ADMIN_KEY"})
        rt = wire(cfg.model_copy(update={"auth": cfg.auth.model_copy(
            update={"enabled": False})}), make_backends(cfg, {}), session)
        clock = FakeClock()
        rt.policy = build_policy(cfg, clock, lambda: 1.7e9 + clock.now(),
                                 {"FUZZ_ADMIN_KEY": ADMIN})
        rt.stages = answer_stages(rt)  # the usage meter with the policy
        await rt.policy.keys.put_tenant(Tenant("fuzz", Limits()))
        issued = [await issue_key(rt.policy.keys, "fuzz", 1.7e9) for _ in range(4)]
        known = {"key": [issued[0][0]], "key_id": [k.id for _, k in issued[1:]],
                 "tenant": ["fuzz"], "ticket": [],
                 "model": ["auto", "general", *{b.model for b in rt.backends.values()}]}
        async with serve_in_background(create_app(cfg, runtime=rt)) as url:
            known["ticket"] = [await _ticket(session, url, known["key"][0]) for _ in range(3)]
            out["url"], out["known"] = url, known
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)
        rt.policy.keys.close()
