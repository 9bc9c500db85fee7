"""The request path reads the key store once per key per cache period, and concurrent
first requests share that one read."""

from __future__ import annotations

import asyncio

import pytest
from fakes.clock import FakeClock

from llmroute.errors import AuthenticationFailed
from llmroute.policy.auth import Authenticator
from llmroute.policy.issue import issue_key
from llmroute.policy.keys import Tenant
from llmroute.policy.keystore import KeyStore


async def test_lookups_are_cached_shared_and_expire(tmp_path):
    store = KeyStore(str(tmp_path / "k.db"))
    await store.put_tenant(Tenant("t"))
    secret, key = await issue_key(store, "t", 0.0)
    reads = 0
    find = store.find

    async def counted(d):
        nonlocal reads
        reads += 1
        return await find(d)

    store.find = counted  # type: ignore[method-assign]
    clock = FakeClock()
    auth = Authenticator(store, 5.0, 100, clock, lambda: 100.0)
    callers = await asyncio.gather(*(auth.authenticate(f"Bearer {secret}", None)
                                     for _ in range(50)))
    assert reads == 1 and {c.key.id for c in callers} == {key.id}
    for _ in range(2):
        with pytest.raises(AuthenticationFailed):
            await auth.authenticate(None, "lr-" + "Z" * 32)
    assert reads == 2  # the unknown key is cached too
    clock.advance(5.0)
    await auth.authenticate(None, secret)
    assert reads == 3
    store.close()


async def test_a_full_cache_drops_the_expired_then_the_least_recently_used(tmp_path):
    store = KeyStore(str(tmp_path / "k.db"))
    await store.put_tenant(Tenant("t"))
    secrets = [(await issue_key(store, "t", 0.0))[0] for _ in range(3)]
    reads = []
    find = store.find

    async def counted(d):
        reads.append(d)
        return await find(d)

    store.find = counted  # type: ignore[method-assign]
    clock = FakeClock()
    auth = Authenticator(store, 5.0, 2, clock, lambda: 100.0)
    await auth.authenticate(None, secrets[0])
    clock.advance(5.0)  # the first lookup expires
    await auth.authenticate(None, secrets[1])
    await auth.authenticate(None, secrets[2])  # full: the expired one goes
    await auth.authenticate(None, secrets[1])
    assert len(reads) == 3
    await auth.authenticate(None, secrets[0])  # full again: secrets[2], used least lately, goes
    await auth.authenticate(None, secrets[1])
    assert len(reads) == 4
    await auth.authenticate(None, secrets[2])
    assert len(reads) == 5
    store.close()
