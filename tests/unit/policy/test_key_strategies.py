"""A key's ``strategies`` allow-list through the app: a request matched by a strategy the key
may not use gets 403 ``strategy_not_allowed`` and reaches no engine; the built-in routing
and listed strategies serve."""

from __future__ import annotations

import textwrap

from fakes.clock import FakeClock
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.assemble.policy import build_policy
from llmroute.assemble.stages import answer_stages
from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Tenant

CHAT = "/v1/chat/completions"
ADMIN = "admin-secret-for-tests"
STRATEGY = """\
strategy_id: errors
version: 1
when: {keywords: [traceback], model: [auto]}
kind: single
pool: general
"""


def _body(text: str) -> dict:
    return {"model": "auto", "messages": [{"role": "user", "content": text}]}


async def test_a_strategy_outside_the_keys_list_is_refused(tmp_path):
    (tmp_path / "errors.yaml").write_text(textwrap.dedent(STRATEGY), encoding="utf-8")
    async with serve_upstream(["ok"]) as up:
        cfg = make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                          gate={"kind": "rules"},
                          strategies={"dir": str(tmp_path), "watch": False},
                          auth={"enabled": True, "keys_path": str(tmp_path / "k.db"),
                                "admin_key_env": "ADMIN_FOR_TESTS"})
        clock = FakeClock()
        async with open_router(cfg.model_copy(update={"auth": cfg.auth.model_copy(
                update={"enabled": False})})) as (rt, client):
            rt.policy = build_policy(cfg, clock, lambda: 1e9 + clock.now(),
                                     {"ADMIN_FOR_TESTS": ADMIN})
            rt.stages = answer_stages(rt)  # the usage meter with the policy
            await rt.policy.keys.put_tenant(Tenant("acme"))
            only_other, _ = await issue_key(rt.policy.keys, "acme", 1e9, strategies=("other",))
            allowed, _ = await issue_key(rt.policy.keys, "acme", 1e9, strategies=("errors",))

            def post(key: str, text: str):
                return client.post(CHAT, json=_body(text),
                                   headers={"authorization": f"Bearer {key}"})

            refused = await post(only_other, "a traceback here")
            builtin = await post(only_other, "hello there")
            served = await post(allowed, "a traceback here")
            rt.policy.keys.close()
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "strategy_not_allowed"
    assert builtin.status_code == 200
    assert builtin.headers["x-llmroute-strategy"] == "builtin-single@0"
    assert served.status_code == 200 and served.headers["x-llmroute-strategy"] == "errors@1"
    assert len(up.requests) == 2
