"""split and shadow over scripted upstreams on loopback: stickiness, the weighted share,
a shadow copy that never delays or changes the answer, its errors, its bound, the per-arm
record in ``/debug/strategies``, and the loader's refusals."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time

import pytest

from fakes.router import open_router, strategy_config
from fakes.upstream import serve_upstream
from llmroute.api.wire import parse_chat
from llmroute.cli.compare import rollout
from llmroute.cli.main import main
from llmroute.errors import ConfigError
from llmroute.strategy.triggers import Asker
from llmroute.types import Intent

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "hello there"}]}
NEVER = "when: {model: [nobody-asks-this]}\n"


def arm(sid: str, pool: str) -> str:
    return f"strategy_id: {sid}\nversion: 1\nkind: single\npool: {pool}\n{NEVER}"


SPLIT = ("strategy_id: ab\nversion: 1\nkind: split\n"
         "arms: [{strategy: arm-a, weight: 1}, {strategy: arm-b, weight: 3}]\n")


def shadow(extra: str = "") -> str:
    return (f"strategy_id: shade\nversion: 2\nkind: shadow\nprimary: arm-a\n"
            f"candidate: arm-b\n{extra}")


def folder(tmp_path, main: str):
    path = tmp_path / "s"
    path.mkdir(exist_ok=True)
    for name, text in (("a.yaml", arm("arm-a", "a")), ("b.yaml", arm("arm-b", "b")),
                       ("main.yaml", main)):
        (path / name).write_text(text, encoding="utf-8")
    return path


async def wait_for(check, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_user_stays_on_one_arm_and_each_arm_is_measured(tmp_path):
    async with serve_upstream(["ok"]) as a, serve_upstream(["ok"]) as b:
        config = strategy_config({"a": [a], "b": [b]}, folder(tmp_path, SPLIT))
        async with open_router(config) as (rt, client):
            arms = set()
            for _ in range(50):
                r = await client.post(CHAT, json={**BODY, "user": "alice"})
                assert r.status_code == 200
                arms.add((r.headers["x-llmroute-arm"], r.headers["x-llmroute-pool"],
                          r.headers["x-llmroute-strategy"], r.headers["x-llmroute-trial"]))
            by_address = {(await client.post(CHAT, json=BODY, headers={
                "x-forwarded-for": "10.1.2.3, 10.0.0.1"})).headers["x-llmroute-arm"]
                for _ in range(20)}
            report = (await client.get("/debug/strategies")).json()["trials"]
    assert len(arms) == 1 and len(by_address) == 1
    (name, pool, header, trial), = arms
    assert header == f"{name}@1" and pool == name[-1] and trial == "ab@1"
    measured = report["ab"]["arms"][name]
    assert report["ab"]["kind"] == "split" and measured["requests"] >= 50
    assert measured["errors"] == 0 and measured["p95_ms"] > 0
    assert report["ab"]["arms"]["arm-a"]["role"] == "baseline"
    assert report["ab"]["arms"]["arm-b"]["role"] == "candidate"


async def test_the_share_over_a_thousand_callers_follows_the_weights(tmp_path, loader):
    files = folder(tmp_path, SPLIT.replace("pool: a", ""))
    for name, pool in (("a.yaml", "general"), ("b.yaml", "long")):
        (files / name).write_text(arm(f"arm-{name[0]}", pool), encoding="utf-8")
    loaded = loader.load_dir(files)
    intent = Intent("chat", 1.0)
    by_user = [loaded.choose(parse_chat({**BODY, "user": f"u{i}"}, f"r{i}"), intent)
               for i in range(1000)]
    by_key = [loaded.choose(parse_chat(BODY, f"k{i}"), intent, asker=Asker(key_id=f"key{i}"))
              for i in range(1000)]
    for picks in (by_user, by_key):
        share_b = sum(m.strategy_id == "arm-b" for m in picks) / len(picks)
        assert 0.70 <= share_b <= 0.80  # weight 3 of 4; binomial sd ≈ 0.014
        assert all(m.trial is not None and m.trial.strategy_id == "ab" for m in picks)
    again = loaded.choose(parse_chat({**BODY, "user": "u1"}, "x"), intent,
                          asker=Asker(key_id="key7"))
    assert again.strategy_id == by_key[7].strategy_id  # the key wins over the body's user


async def test_a_slow_shadow_never_delays_the_answer(tmp_path):
    async with serve_upstream([("say", "primary"), "ok"]) as a, \
            serve_upstream([("hang", 2)]) as b:
        config = strategy_config({"a": [a], "b": [b]}, folder(tmp_path, shadow()))
        async with open_router(config) as (rt, client):
            t0 = time.monotonic()
            r = await client.post(CHAT, json=BODY)
            took = time.monotonic() - t0
            streamed = await client.post(CHAT, json={**BODY, "stream": True})
            stats = rt.strategy.trials
            await wait_for(lambda: stats.tally("shade", "arm-b").requests == 2)
            report = (await client.get("/debug/strategies")).json()["trials"]["shade"]
    assert r.status_code == 200 and took < 1.0
    assert r.json()["choices"][0]["message"]["content"] == "primary"
    assert r.headers["x-llmroute-arm"] == "arm-a" and r.headers["x-llmroute-pool"] == "a"
    assert streamed.status_code == 200 and "[DONE]" in streamed.text
    assert all(req["stream"] is False for req in b.requests)  # copies are never streamed
    assert report["kind"] == "shadow"
    assert report["arms"]["arm-b"]["p95_ms"] >= 1900
    assert report["arms"]["arm-a"]["p95_ms"] < 1000 and report["arms"]["arm-a"]["requests"] == 2


async def test_shadow_errors_never_reach_the_client(tmp_path):
    async with serve_upstream([("say", "fine")]) as a, \
            serve_upstream([("status", 500, None)]) as b, \
            serve_upstream([("status", 500, None)]) as c:
        files = folder(tmp_path, shadow())  # a fusion candidate: no pool to fall back to
        (files / "b.yaml").write_text("strategy_id: arm-b\nversion: 1\nkind: fusion\n"
                                      f"voters: [{{pool: b}}, {{pool: c}}]\n{NEVER}")
        config = strategy_config({"a": [a], "b": [b], "c": [c]}, files)
        async with open_router(config) as (rt, client):
            answers = [await client.post(CHAT, json=BODY) for _ in range(3)]
            stats = rt.strategy.trials
            await wait_for(lambda: stats.tally("shade", "arm-b").requests == 3)
            summary = stats.summary()["shade"]
    assert all(r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
               == "fine" for r in answers)
    assert summary["arm-b"]["errors"] == 3 and summary["arm-b"]["error_rate"] == 1.0
    assert summary["arm-a"]["errors"] == 0


async def test_shadow_copies_beyond_the_bound_are_dropped_and_counted(tmp_path):
    async with serve_upstream(["ok"]) as a, serve_upstream([("hang", 1)]) as b:
        config = strategy_config({"a": [a], "b": [b]},
                                 folder(tmp_path, shadow("max_in_flight: 1\n")))
        async with open_router(config) as (rt, client):
            for _ in range(3):
                assert (await client.post(CHAT, json=BODY)).status_code == 200
            stats = rt.strategy.trials
            await wait_for(lambda: stats.tally("shade", "arm-b").requests == 1)
            metrics = (await client.get("/metrics")).text
    assert stats.tally("shade", "arm-b").dropped == 2
    assert 'llmroute_strategy_shadow_dropped_total{strategy="shade"} 2.0' in metrics
    assert 'llmroute_strategy_arm_seconds_count{arm="arm-a",strategy="shade"} 3.0' in metrics


@pytest.mark.parametrize(("main", "field", "message"), [
    (SPLIT.replace("arm-b, weight: 3", "ghost, weight: 3"), "arms.1.strategy",
     "unknown strategy 'ghost'"),
    (SPLIT.replace("arm-a, weight: 1", "ab, weight: 1"), "arms.0.strategy",
     "names the split strategy itself"),
    (SPLIT.replace("weight: 3", "weight: 0"), "arms.1.weight", "greater than 0"),
    (SPLIT.replace("weight: 1", "weight: -1"), "arms.0.weight", "greater than 0"),
    (SPLIT.replace("arm-b, weight: 3", "arm-a, weight: 3"), "arms", "both arms"),
    (shadow().replace("candidate: arm-b", "candidate: ab2"), "candidate",
     "is a split itself"),
    (shadow().replace("max_in_flight", "") + "max_in_flight: 0\n", "max_in_flight",
     "greater than or equal to 1"),
])
def test_the_loader_refuses_bad_arms(tmp_path, loader, main, field, message):
    files = folder(tmp_path, main)
    for name, pool in (("a.yaml", "general"), ("b.yaml", "long")):
        (files / name).write_text(arm(f"arm-{name[0]}", pool), encoding="utf-8")
    (files / "ab2.yaml").write_text(SPLIT.replace("ab\n", "ab2\n"), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        loader.load_dir(files)
    assert f"main.yaml:" in caught.value.message and field in caught.value.message
    assert message in caught.value.message


def arm_row(role, p95, error_rate=0.0, quality=None, requests=100):
    return {"role": role, "requests": requests, "errors": int(error_rate * requests),
            "error_rate": error_rate, "p95_ms": p95, "quality": quality, "dropped": 0}


@pytest.mark.parametrize(("cand", "holds", "words"), [
    (arm_row("candidate", 110.0), True, "no quality signal"),
    (arm_row("candidate", 116.0), False, "P95 +16.0%"),
    (arm_row("candidate", 90.0, error_rate=0.02), False, "error rate 2.00% vs 1.00%"),
    (arm_row("candidate", None), False, "no latency"),
])
def test_the_rollout_rule(cand, holds, words):
    ok, reasons = rollout(arm_row("baseline", 100.0, error_rate=0.01), cand)
    assert ok is holds and words in "; ".join(reasons)


def test_quality_counts_only_where_both_arms_were_verified():
    base = arm_row("baseline", 100.0, quality=0.9)
    assert rollout(base, arm_row("candidate", 100.0, quality=0.88))[0] is True
    ok, reasons = rollout(base, arm_row("candidate", 100.0, quality=0.86))
    assert ok is False and "quality -4.0%" in reasons[-1]


def test_compare_prints_the_arms_side_by_side(capsys):
    trials = {"ab": {"kind": "split", "arms": {"arm-a": arm_row("baseline", 100.0),
                                               "arm-b": arm_row("candidate", 130.0)}}}
    payload = json.dumps({"trials": trials}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server hook
            self.send_response(200 if self.path == "/debug/strategies" else 404)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code = main(["strategy", "compare", "--url",
                     f"http://127.0.0.1:{server.server_address[1]}"])
    finally:
        server.shutdown()
    out = capsys.readouterr().out
    assert code == 1 and "ab (split)" in out and "rollout rule FAILS" in out
    assert "arm-a" in out and "130.0" in out and "no quality signal" in out
    assert main(["strategy", "compare", "--url", "http://127.0.0.1:9"]) == 2
