"""Key roles through the app: an ``operator`` key reads the operator surfaces (debug,
metrics, traces, hand-offs) and uses ``/admin/*`` (key management, reload) like the admin
key; inference keys get neither; refusals are OpenAI-shaped; changes are logged by key id,
never by secret; keys rotate through the admin API; ``llmroute keys create --role``."""

from __future__ import annotations

import json

import pytest
import structlog

from llmroute.cli.main import main

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
OPERATOR_READS = ["/debug/backends", "/debug/fuse", "/debug/requests", "/debug/strategies",
                  "/metrics", "/trace/req-unknown", "/admin/handoffs"]
ADMIN = [("GET", "/admin/keys"), ("POST", "/admin/keys"),
              ("DELETE", "/admin/keys/key_000000000000"),
              ("POST", "/admin/keys/key_000000000000/rotate"), ("POST", "/admin/reload")]


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_an_operator_key_reads_the_operator_surfaces(gated):
    async with gated() as g:
        op, _ = await g.issue(role="operator")
        user, _ = await g.issue()
        for path in OPERATOR_READS:
            by_op = await g.client.get(path, headers=bearer(op))
            by_user = await g.client.get(path, headers=bearer(user))
            assert by_op.status_code not in (401, 403), (path, by_op.text)
            assert by_user.status_code == 403, path
            assert by_user.json()["error"]["code"] == "admin_key_required"
        assert (await g.client.get("/debug/backends", headers=bearer(op))).status_code == 200
        assert (await g.client.post(CHAT, json=BODY, headers=bearer(op))).status_code == 200


@pytest.mark.parametrize("method,path", ADMIN, ids=[f"{m} {p}" for m, p in ADMIN])
async def test_key_management_and_reload_take_an_operator_key_not_an_inference_key(
        gated, method, path):
    async with gated() as g:
        op, _ = await g.issue(role="operator")
        user, _ = await g.issue()
        by_op = await g.client.request(method, path, headers=bearer(op), json={"tenant": "acme"})
        by_user = await g.client.request(method, path, headers=bearer(user),
                                         json={"tenant": "acme"})
    assert by_op.status_code not in (401, 403, 500), by_op.text
    assert by_user.status_code == 403
    err = by_user.json()["error"]
    assert err["code"] == "admin_key_required" and err["type"] == "invalid_request_error"
    assert user not in by_user.text and op not in by_op.text


async def test_unknown_revoked_or_expired_operator_keys_get_401(gated):
    async with gated() as g:
        expired, _ = await g.issue(role="operator", expires_at=1.0)
        revoked, key = await g.issue(role="operator")
        await g.rt.policy.keys.revoke(key.id, 5.0)
        unknown = revoked[:-4] + ("AAAA" if not revoked.endswith("AAAA") else "BBBB")
        answers = [await g.client.get("/debug/backends", headers=bearer(k))
                   for k in (expired, revoked, unknown)]
        # a wrong admin key, or any key not of the lr- shape, is an unknown key too
        malformed = [await g.client.get("/debug/backends", headers=bearer(k))
                     for k in ("not-the-admin", "x" * 10_000, "lr-abc")]
    assert [a.status_code for a in answers + malformed] == [401] * 6
    assert {a.json()["error"]["code"] for a in answers + malformed} == {"invalid_api_key"}


async def test_the_admin_api_makes_operator_keys_and_logs_changes_by_id(gated):
    async with gated() as g:
        await g.issue()  # the tenant acme now exists
        made = await g.client.post("/admin/keys", headers=bearer(g.admin),
                                   json={"tenant": "acme", "role": "operator"})
        secret, key_id = made.json()["key"], made.json()["record"]["id"]
        bad = await g.client.post("/admin/keys", headers=bearer(g.admin),
                                  json={"tenant": "acme", "role": "root"})
        with structlog.testing.capture_logs() as logs:
            claim = await g.client.post("/admin/handoffs/t-1/claim", headers=bearer(secret),
                                        json={})
            await g.client.post("/admin/keys", headers=bearer(g.admin), json={"tenant": "acme"})
        stored = await g.rt.policy.keys.key(key_id)
    assert made.status_code == 201 and made.json()["record"]["role"] == "operator"
    assert stored is not None and stored.role == "operator"
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "role"
    assert claim.status_code == 404  # let through; this router keeps no hand-offs
    actions = [e for e in logs if e["event"] == "operator_action"]
    assert [(a["by"], a["method"], a["path"]) for a in actions] == [
        (key_id, "POST", "/admin/handoffs/t-1/claim"), ("admin", "POST", "/admin/keys")]
    assert secret not in repr(logs) and g.admin not in repr(logs)


async def test_the_admin_api_rotates_a_key(gated):
    async with gated() as g:
        old, key = await g.issue(role="operator", models=("auto",))
        before = await g.client.get("/debug/backends", headers=bearer(old))
        r = await g.client.post(f"/admin/keys/{key.id}/rotate", headers=bearer(g.admin))
        new = r.json()["key"]
        after_old = await g.client.get("/debug/backends", headers=bearer(old))
        after_new = await g.client.get("/debug/backends", headers=bearer(new))
        again = await g.client.post(f"/admin/keys/{key.id}/rotate", headers=bearer(g.admin))
    assert before.status_code == 200 and r.status_code == 201
    record = r.json()["record"]
    assert record["id"] != key.id and record["role"] == "operator"
    assert record["models"] == ["auto"] and record["tenant"] == "acme"
    assert after_old.status_code == 401 and after_new.status_code == 200
    assert again.status_code == 400 and again.json()["error"]["param"] == "key_id"


def test_the_cli_makes_operator_keys(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("pools: {general: {}}\nbackends: [{id: a, pool: general, engine: vllm, "
                   "base_url: 'http://127.0.0.1:9'}]\nrouting: {default_pool: general}\n"
                   f"auth: {{keys_path: {tmp_path / 'k.db'}}}\n")
    assert main(["tenants", "create", "ops", "--config", str(cfg)]) == 0
    assert main(["keys", "create", "--tenant", "ops", "--role", "operator",
                 "--config", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--config", str(cfg)]) == 0
    made = json.loads(capsys.readouterr().out)
    assert [k["role"] for k in made] == ["operator"]
    with pytest.raises(SystemExit):
        main(["keys", "create", "--tenant", "ops", "--role", "root", "--config", str(cfg)])
