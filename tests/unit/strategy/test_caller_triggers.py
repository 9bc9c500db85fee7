"""With auth on, the tenant / API-key name / priority-class triggers read the authenticated
caller, never headers a client can forge; with auth off the headers still serve."""

from __future__ import annotations

from fakes.clock import FakeClock
from fakes.router import make_config, open_router
from fakes.upstream import serve_upstream

from llmroute.assemble.policy import build_policy
from llmroute.assemble.stages import answer_stages
from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Tenant

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "hello there"}]}
FILES = {
    "vip.yaml": "strategy_id: vip\nversion: 1\npriority: 3\nkind: single\npool: general\n"
                "when: {tenant: [acme]}\n",
    "named.yaml": "strategy_id: named\nversion: 1\npriority: 2\nkind: single\n"
                  "pool: general\nwhen: {api_key: [nightly-batch]}\n",
    "classy.yaml": "strategy_id: classy\nversion: 1\npriority: 1\nkind: single\n"
                   "pool: general\nwhen: {priority_class: [gold]}\n",
}
FORGED = {"x-llmroute-tenant": "acme", "x-llmroute-api-key-name": "nightly-batch",
          "x-llmroute-priority": "gold"}


def _config(tmp_path, up, auth: bool):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return make_config([{"id": "a", "pool": "general", "base_url": up.base_url}],
                       gate={"kind": "rules"}, strategies={"dir": str(tmp_path), "watch": False},
                       auth={"enabled": auth, "keys_path": str(tmp_path / "k.db"),
                             "admin_key_env": "ADMIN_FOR_TESTS"})


async def test_forged_headers_select_nothing_when_auth_is_on(tmp_path):
    async with serve_upstream(["ok"]) as up:
        cfg = _config(tmp_path, up, auth=True)
        clock = FakeClock()
        async with open_router(cfg.model_copy(update={"auth": cfg.auth.model_copy(
                update={"enabled": False})})) as (rt, client):
            rt.policy = build_policy(cfg, clock, lambda: 1e9 + clock.now(),
                                     {"ADMIN_FOR_TESTS": "admin-secret-for-tests"})
            rt.stages = answer_stages(rt)  # the usage meter with the policy
            for tenant in ("acme", "evil"):
                await rt.policy.keys.put_tenant(Tenant(tenant))
            evil, _ = await issue_key(rt.policy.keys, "evil", 1e9)
            acme, _ = await issue_key(rt.policy.keys, "acme", 1e9)
            batch, _ = await issue_key(rt.policy.keys, "evil", 1e9, name="nightly-batch")
            gold, _ = await issue_key(rt.policy.keys, "evil", 1e9, priority="gold")

            async def strategy(key: str, headers: dict[str, str]) -> str:
                r = await client.post(CHAT, json=BODY, headers={
                    "authorization": f"Bearer {key}", **headers})
                assert r.status_code == 200
                return r.headers["x-llmroute-strategy"]

            forged = await strategy(evil, FORGED)
            real = [await strategy(k, {}) for k in (acme, batch, gold)]
            acme_forging = await strategy(acme, {"x-llmroute-tenant": "evil"})
            rt.policy.keys.close()
    assert forged == "builtin-single@0"
    assert real == ["vip@1", "named@1", "classy@1"]
    assert acme_forging == "vip@1"


async def test_the_headers_serve_when_auth_is_off(tmp_path):
    async with serve_upstream(["ok"]) as up:
        async with open_router(_config(tmp_path, up, auth=False)) as (_, client):
            answers = [await client.post(CHAT, json=BODY, headers={name: value})
                       for name, value in FORGED.items()]
    assert [r.headers["x-llmroute-strategy"] for r in answers] == [
        "vip@1", "named@1", "classy@1"]
