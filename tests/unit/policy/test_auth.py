"""Authentication through the app: keys in either header, 401/403 in OpenAI shape, the
operator surfaces behind the admin key, and bad input that never gives a 500."""

from __future__ import annotations

import pytest

from llmroute.policy.keys import Tenant

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_a_key_works_in_either_header_and_none_gives_401(gated):
    async with gated() as g:
        secret, key = await g.issue()
        ok = await g.client.post(CHAT, json=BODY, headers=bearer(secret))
        ok2 = await g.client.post(CHAT, json=BODY, headers={"x-api-key": secret})
        missing = await g.client.post(CHAT, json=BODY)
    assert ok.status_code == 200 and ok2.status_code == 200
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "missing_api_key"
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert len(g.up.requests) == 2  # the refused request reached no engine


@pytest.mark.parametrize("state", ["unknown", "revoked", "expired"])
async def test_unknown_revoked_and_expired_keys_get_401_invalid_api_key(gated, state):
    async with gated() as g:
        secret, key = await g.issue(expires_at=1.0 if state == "expired" else None)
        if state == "unknown":
            secret = secret[:-4] + ("AAAA" if not secret.endswith("AAAA") else "BBBB")
        if state == "revoked":
            await g.rt.policy.keys.revoke(key.id, 5.0)
        r = await g.client.post(CHAT, json=BODY, headers=bearer(secret))
    assert r.status_code == 401
    err = r.json()["error"]
    assert err["code"] == "invalid_api_key" and secret not in r.text
    assert not g.up.requests


async def test_a_key_limited_to_other_models_or_pools_gets_403(gated):
    async with gated() as g:
        by_model, _ = await g.issue(models=("other",))
        by_pool, _ = await g.issue(pools=("other",))
        r1 = await g.client.post(CHAT, json=BODY, headers=bearer(by_model))
        r2 = await g.client.post(CHAT, json=BODY, headers=bearer(by_pool))
        allowed, _ = await g.issue(models=("auto",), pools=("general",))
        r3 = await g.client.post(CHAT, json=BODY, headers=bearer(allowed))
    assert (r1.status_code, r1.json()["error"]["code"]) == (403, "model_not_allowed")
    assert (r2.status_code, r2.json()["error"]["code"]) == (403, "pool_not_allowed")
    assert r3.status_code == 200 and len(g.up.requests) == 1


@pytest.mark.parametrize("path", ["/debug/backends", "/debug/fuse", "/metrics", "/admin/keys"])
async def test_operator_surfaces_need_the_admin_key(gated, path):
    async with gated() as g:
        user, _ = await g.issue()
        none = await g.client.get(path)
        other = await g.client.get(path, headers=bearer(user))
        admin = await g.client.get(path, headers=bearer(g.admin))
    assert none.status_code == 401 and other.status_code == 403
    assert other.json()["error"]["code"] == "admin_key_required"
    assert admin.status_code == 200


async def test_metrics_can_be_left_open(gated):
    async with gated(metrics_open=True) as g:
        assert (await g.client.get("/metrics")).status_code == 200
        assert (await g.client.get("/debug/backends")).status_code == 401


@pytest.mark.parametrize("value", [
    b"Bearer lr-short", b"Bearer " + b"a" * 10_000, b"Bearer lr-\xff\xfe" + b"x" * 30,
    b"Basic dXNlcjpwYXNz", b"Bearer", b"lr-" + b"\xc3\xa9" * 16, b"Bearer  \t "],
    ids=["short", "10kB", "non-ascii", "basic", "empty-bearer", "utf8", "blank"])
async def test_bad_keys_get_401_never_500(gated, value):
    async with gated() as g:
        r = await g.client.post(CHAT, json=BODY, headers=[(b"authorization", value)])
        r2 = await g.client.post(CHAT, json=BODY, headers=[(b"x-api-key", value)])
    assert r.status_code == 401 and r2.status_code == 401
    assert r.json()["error"]["type"] == "invalid_request_error"


async def test_auth_comes_before_the_body_is_read(gated):
    async with gated() as g:
        r = await g.client.post(CHAT, content=b"{not json",
                                headers={"content-type": "application/json"})
    assert r.status_code == 401


async def test_a_revocation_through_the_admin_api_takes_effect_at_once(gated):
    async with gated() as g:
        ADMIN = g.admin
        await g.rt.policy.keys.put_tenant(Tenant("acme"))
        made = await g.client.post("/admin/keys", headers=bearer(ADMIN), json={
            "tenant": "acme", "limits": {"rpm": 100}})
        secret, key_id = made.json()["key"], made.json()["record"]["id"]
        listed = await g.client.get("/admin/keys", headers=bearer(ADMIN))
        before = await g.client.post(CHAT, json=BODY, headers=bearer(secret))
        gone = await g.client.delete(f"/admin/keys/{key_id}", headers=bearer(ADMIN))
        after = await g.client.post(CHAT, json=BODY, headers=bearer(secret))
        again = await g.client.delete(f"/admin/keys/{key_id}", headers=bearer(ADMIN))
        bad = await g.client.post("/admin/keys", headers=bearer(ADMIN), json={"tenant": "x",
                                  "limits": {"rpm": -1}})
    assert made.status_code == 201 and secret.startswith("lr-")
    assert [k["id"] for k in listed.json()["data"]] == [key_id] and secret not in listed.text
    assert listed.json()["data"][0]["limits"]["rpm"] == 100
    assert before.status_code == 200 and gone.status_code == 200
    assert after.status_code == 401 and again.status_code == 404
    assert bad.status_code == 400



async def test_the_model_list_needs_a_key_too(gated):
    async with gated() as g:
        user, _ = await g.issue()
        none = await g.client.get("/v1/models")
        wrong = await g.client.get("/v1/models", headers=bearer("lr-" + "A" * 32))
        good = await g.client.get("/v1/models", headers=bearer(user))
    assert (none.status_code, none.json()["error"]["code"]) == (401, "missing_api_key")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (401, "invalid_api_key")
    assert good.status_code == 200 and "auto" in [m["id"] for m in good.json()["data"]]
