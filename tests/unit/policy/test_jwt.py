"""JWT callers (``auth.jwt``) through the app: tokens signed with real RS256, ES256 and
EdDSA keys against a JWKS file (and a JWKS served on loopback that goes down): a good token
serves and is limited and traced as a key would be; expired, wrong audience or issuer, not
yet valid, unknown ``kid``, ``alg: none``, a bad signature and missing claims are 401s that
name the problem and are counted; API keys keep working beside; a JWKS that goes down keeps
its keys until ``keys_ttl_s``, then every token is a clear 401 and a metric."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
import pytest
from aiohttp import web
from fakes.http import serve_app
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from llmroute.policy.keys import Limits

ISSUER, AUDIENCE = "https://idp.example", "llmroute"
CHAT = {"model": "auto", "messages": [{"role": "user", "content": "Hi"}]}
_KINDS = {"RS256": (lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
                    RSAAlgorithm),
          "ES256": (lambda: ec.generate_private_key(ec.SECP256R1()), ECAlgorithm),
          "EdDSA": (ed25519.Ed25519PrivateKey.generate, OKPAlgorithm)}


class Idp:
    """Signing keys by kid and their JWKS."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[str, Any]] = {}

    def add(self, kid: str, alg: str) -> None:
        self.keys[kid] = (alg, _KINDS[alg][0]())

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid, (alg, key) in self.keys.items():
            jwk = json.loads(_KINDS[alg][1].to_jwk(key.public_key()))
            out.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
        return {"keys": out}

    def token(self, kid: str = "rsa", alg: str | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600,
                "sub": "alice", "tenant": "acme", **claims}
        alg_, key = self.keys[kid]
        return jwt.encode({k: v for k, v in body.items() if v is not None}, key,
                          algorithm=alg or alg_, headers={"kid": kid})


@pytest.fixture
def idp(tmp_path):
    made = Idp()
    for kid, alg in (("rsa", "RS256"), ("ec", "ES256"), ("ed", "EdDSA")):
        made.add(kid, alg)
    (tmp_path / "jwks.json").write_text(json.dumps(made.jwks()))
    return made


def jwt_auth(tmp_path: Any, **extra: Any) -> dict[str, Any]:
    return {"jwt": {"issuer": ISSUER, "audience": AUDIENCE,
                    "jwks_file": str(tmp_path / "jwks.json"), **extra}}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize("kid", ["rsa", "ec", "ed"], ids=["RS256", "ES256", "EdDSA"])
async def test_a_good_token_serves_as_its_tenant(gated, idp, tmp_path, kid):
    async with gated(**jwt_auth(tmp_path)) as g:
        r = await g.client.post("/v1/chat/completions", json=CHAT,
                                headers=bearer(idp.token(kid)))
        trace = g.rt.observer.ring.get(r.headers["x-request-id"])
    assert r.status_code == 200, r.text
    assert (trace.summary["tenant"], trace.summary["key_id"]) == ("acme", "jwt:alice")


def _unsigned(idp: Idp) -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT","kid":"rsa"}').rstrip(b"=")
    now = int(time.time())
    body = base64.urlsafe_b64encode(json.dumps({
        "iss": ISSUER, "aud": AUDIENCE, "exp": now + 600, "sub": "alice",
        "tenant": "acme"}).encode()).rstrip(b"=")
    return f"{head.decode()}.{body.decode()}."


def _forged(idp: Idp) -> str:
    other = Idp()
    other.add("rsa", "RS256")  # the same kid, another key
    return other.token("rsa")


REFUSED = {
    "expired": (lambda i: i.token(exp=int(time.time()) - 120), "expired"),
    "wrong-audience": (lambda i: i.token(aud="someone-else"), "audience"),
    "wrong-issuer": (lambda i: i.token(iss="https://evil.example"), "issuer"),
    "not-yet-valid": (lambda i: i.token(nbf=int(time.time()) + 3600), "not valid yet"),
    "unknown-kid": (lambda i: _renamed(i.token(), "nobody"), "kid 'nobody'"),
    "alg-none": (_unsigned, "algorithm 'none'"),
    "bad-signature": (_forged, "signature"),
    "no-tenant": (lambda i: i.token(tenant=None), "'tenant'"),
    "no-exp": (lambda i: i.token(exp=None), "exp"),
    "hmac": (lambda i: jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "a",
                                   "tenant": "acme", "exp": int(time.time()) + 60},
                                  "x" * 32, algorithm="HS256", headers={"kid": "rsa"}),
             "algorithm 'HS256'"),
}


def _renamed(token: str, kid: str) -> str:
    head, rest = token.split(".", 1)
    header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    new = base64.urlsafe_b64encode(json.dumps({**header, "kid": kid}).encode()).rstrip(b"=")
    return new.decode() + "." + rest


@pytest.mark.parametrize("make,says", REFUSED.values(), ids=REFUSED.keys())
async def test_a_bad_token_is_a_clear_401(gated, idp, tmp_path, make, says):
    async with gated(**jwt_auth(tmp_path, leeway_s=5)) as g:
        token = make(idp)
        r = await g.client.post("/v1/chat/completions", json=CHAT, headers=bearer(token))
        count = await g.client.post("/v1/messages", json={**CHAT, "max_tokens": 5},
                                    headers={"x-api-key": token})
    assert r.status_code == 401 and says in r.json()["error"]["message"], r.text
    assert r.json()["error"]["code"] == "invalid_token" and token not in r.text
    assert (count.status_code, count.json()["error"]["type"]) == (401, "authentication_error")
    assert not g.up.requests


async def test_a_jwt_caller_is_limited_as_a_key_and_keys_work_beside(gated, idp, tmp_path):
    async with gated(**jwt_auth(tmp_path)) as g:
        key, record = await g.issue(tenant="acme", tenant_limits=Limits(rpm=2))
        token = idp.token()
        first = await g.client.post("/v1/chat/completions", json=CHAT, headers=bearer(token))
        by_key = await g.client.post("/v1/chat/completions", json=CHAT, headers=bearer(key))
        third = await g.client.post("/v1/chat/completions", json=CHAT, headers=bearer(token))
    assert (first.status_code, by_key.status_code) == (200, 200)
    assert third.status_code == 429  # the tenant's 2 rpm, shared by its key and its JWTs


async def test_a_token_naming_a_key_takes_its_permissions(gated, idp, tmp_path):
    async with gated(**jwt_auth(tmp_path)) as g:
        _, record = await g.issue(tenant="acme", models=("gpt-x",))
        r = await g.client.post("/v1/chat/completions", json=CHAT,
                                headers=bearer(idp.token(sub=record.id)))
        other = await g.client.post("/v1/chat/completions", json=CHAT, headers=bearer(
            idp.token(sub=record.id, tenant="globex")))
    assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"
    assert other.status_code == 200  # another tenant's token does not get acme's key


async def test_the_operator_role_comes_from_the_roles_claim(gated, idp, tmp_path):
    async with gated(**jwt_auth(tmp_path)) as g:
        plain = await g.client.get("/debug/backends", headers=bearer(idp.token()))
        operator = await g.client.get("/debug/backends", headers=bearer(
            idp.token(roles=["inference", "operator"])))
    assert (plain.status_code, operator.status_code) == (403, 200)


async def test_a_jwks_that_goes_down_keeps_its_keys_until_they_expire(gated, idp, tmp_path):
    served = {"up": True}

    async def jwks(request: web.Request) -> web.Response:
        if not served["up"]:
            return web.Response(status=503)
        return web.json_response(idp.jwks())

    app = web.Application()
    app.router.add_get("/jwks", jwks)
    async with serve_app(app) as base:
        auth = {"jwt": {"issuer": ISSUER, "audience": AUDIENCE, "jwks_url": base + "/jwks",
                        "refresh_s": 10, "min_refresh_s": 1, "keys_ttl_s": 60},
                "cache_ttl_s": 0.001}
        async with gated(**auth) as g:
            async def ask(kid: str = "rsa") -> Any:
                g.clock.advance(0.01)  # past the verified-token cache
                return await g.client.post("/v1/chat/completions", json=CHAT,
                                           headers=bearer(idp.token(kid)))
            ok = await ask()
            served["up"] = False
            g.clock.advance(30)  # past refresh_s: a background read fails
            still = await ask("ec")
            g.clock.advance(40)  # past keys_ttl_s since the last good read
            gone = await ask()
            metrics = g.rt.policy.jwt._metrics  # type: ignore[union-attr]
            refusals = metrics.refusals.labels("jwks_unavailable")._value.get()
            errors = metrics.reads.labels("error")._value.get()
            served["up"] = True
            g.clock.advance(2)  # past min_refresh_s: the next token reads again
            back = await ask()
    assert (ok.status_code, still.status_code, back.status_code) == (200, 200, 200)
    assert gone.status_code == 401 and gone.json()["error"]["code"] == "jwks_unavailable"
    assert "could not be read" in gone.json()["error"]["message"]
    assert refusals == 1 and errors >= 1
