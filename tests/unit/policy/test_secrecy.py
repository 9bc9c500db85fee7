"""Keys never leave as plaintext: not in the SQLite file, not in logs, not in error
bodies; generated keys have the promised shape and randomness."""

from __future__ import annotations

import sqlite3

import structlog

from llmroute.policy.keys import digest, new_secret, well_formed

CHAT = "/v1/chat/completions"
BODY = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}


async def test_the_key_store_holds_only_digests(gated, tmp_path):
    async with gated() as g:
        secret, key = await g.issue()
        g.rt.policy.keys.close()
    raw = (tmp_path / "keys.db").read_bytes()
    assert secret.encode() not in raw and secret[3:].encode() not in raw
    rows = sqlite3.connect(tmp_path / "keys.db").execute("SELECT digest FROM keys").fetchall()
    assert rows == [(digest(secret),)]


async def test_keys_never_reach_logs_or_error_bodies(gated):
    async with gated(script=[("status", 500)]) as g:
        secret, key = await g.issue()
        bad = secret[:-1] + ("A" if secret[-1] != "A" else "B")
        with structlog.testing.capture_logs() as logs:
            answers = [await g.client.post(CHAT, json=BODY, headers={
                "authorization": f"Bearer {k}"}) for k in (secret, bad, "x" * 5000)]
            await g.rt.policy.keys.revoke(key.id, 1.0)
            g.rt.policy.auth.forget()
            answers.append(await g.client.post(CHAT, json=BODY, headers={"x-api-key": secret}))
    assert [a.status_code for a in answers] == [502, 401, 401, 401]
    text = repr(logs) + "".join(a.text for a in answers)
    assert secret not in text and bad not in text and secret[3:20] not in text


def test_generated_keys_are_well_formed_and_distinct():
    keys = {new_secret() for _ in range(1000)}
    assert len(keys) == 1000 and all(well_formed(k) and len(k) == 35 for k in keys)
    assert not well_formed("lr-" + "a" * 31) and not well_formed("lr-" + "a" * 33)
