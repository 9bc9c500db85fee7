"""What a JWT caller costs per request (``policy/jwt.py``), its JWKS keys already read.

    python bench/jwt_verify.py [--quick | --smoke]

Two paths, per algorithm (RS256 with a 2048-bit key, ES256, EdDSA), timed in-process one
call at a time with ``time.perf_counter_ns``:

* ``cached`` — ``JwtAuthenticator.authenticate`` of a token it verified before (the
  client reuses its token, as clients do for the token's lifetime): a dictionary lookup and
  an ``exp`` check. The issue's target reads this one: p50 ≤ 50 µs.
* ``verify`` — ``JwtAuthenticator.verify`` of the token: header, key lookup, signature,
  ``exp``/``nbf``/``iss``/``aud`` (PyJWT + cryptography): what a token costs the first time
  it is seen.

Prints a table and, as its last line, ``RESULT {json}`` with p50/p95 in µs per path and
algorithm and whether the target is met.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from modes import mode, parser, pick  # noqa: E402

from llmroute.config.policy import JwtConfig  # noqa: E402
from llmroute.policy.jwks import Jwks, JwtMetrics  # noqa: E402
from llmroute.policy.jwt import JwtAuthenticator  # noqa: E402
from llmroute.policy.keystore import KeyStore  # noqa: E402

TARGET_US = 50.0
KEYS = {"RS256": (lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
                  RSAAlgorithm),
        "ES256": (lambda: ec.generate_private_key(ec.SECP256R1()), ECAlgorithm),
        "EdDSA": (ed25519.Ed25519PrivateKey.generate, OKPAlgorithm)}


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def _measure(rounds: int, work: Path) -> dict[str, dict[str, float]]:
    private = {alg: make() for alg, (make, _) in KEYS.items()}
    jwks = {"keys": [{**json.loads(KEYS[alg][1].to_jwk(k.public_key())), "kid": alg,
                      "alg": alg} for alg, k in private.items()]}
    (work / "jwks.json").write_text(json.dumps(jwks))
    config = JwtConfig(issuer="https://idp", audience="llmroute",
                       jwks_file=str(work / "jwks.json"))
    metrics = JwtMetrics(None)
    auth = JwtAuthenticator(config, Jwks(config, metrics, time.monotonic),
                            KeyStore(str(work / "keys.db")), metrics, 3600.0,
                            time.monotonic, time.time)
    out: dict[str, dict[str, float]] = {}
    now = int(time.time())
    for alg, key in private.items():
        token = jwt.encode({"iss": "https://idp", "aud": "llmroute", "exp": now + 3600,
                            "iat": now, "sub": "alice", "tenant": "acme"}, key,
                           algorithm=alg, headers={"kid": alg})
        await auth.authenticate(token)  # reads the JWKS, caches the token
        for name, call in (("cached", auth.authenticate), ("verify", auth.verify)):
            times = []
            for _ in range(rounds):
                t0 = time.perf_counter_ns()
                await call(token)
                times.append((time.perf_counter_ns() - t0) / 1000)
            out[f"{name}-{alg}"] = {"p50_us": round(statistics.median(times), 2),
                                    "p95_us": round(_percentile(times, 95), 2)}
    return out


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    rounds = pick(mode(args), 5000, 500, 20)
    with tempfile.TemporaryDirectory() as tmp:
        cells = asyncio.run(_measure(rounds, Path(tmp)))
    print(f"{'path':<16}{'p50 µs':>10}{'p95 µs':>10}")
    for name, cell in cells.items():
        print(f"{name:<16}{cell['p50_us']:>10.2f}{cell['p95_us']:>10.2f}")
    cached = max(c["p50_us"] for n, c in cells.items() if n.startswith("cached"))
    print(f"cached-token p50 (worst algorithm) {cached:.2f} µs, target ≤ {TARGET_US:g} µs")
    print("RESULT " + json.dumps({"rounds": rounds, "cells": cells,
                                  "cached_p50_us": cached, "target_us": TARGET_US,
                                  "target_met": cached <= TARGET_US}))


if __name__ == "__main__":
    main()
