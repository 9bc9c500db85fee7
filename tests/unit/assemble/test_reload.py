"""Reload's refusals that need no upstream: launched engines, no config file, an app not
started by ``llmroute serve``, and the ``llmroute reload`` command with no router."""

from __future__ import annotations

import pytest

from llmroute.assemble.reload import _check_launch
from llmroute.cli.main import main
from llmroute.errors import ConfigError
from tests.fakes.router import make_config, open_router

REMOTE = {"id": "r", "pool": "p", "model": "m", "base_url": "http://127.0.0.1:9"}
LOCAL = {"id": "l", "pool": "p", "model": "m", "engine": "llamacpp", "launch": {}}


def test_a_reload_that_starts_stops_or_changes_a_launched_engine_is_refused():
    with_engine = make_config([REMOTE, LOCAL])
    _check_launch(with_engine, make_config([LOCAL, {**REMOTE, "model": "other"}]))
    for other in (make_config([REMOTE]),
                  make_config([REMOTE, {**LOCAL, "launch": {"ctx_size": 8192}}])):
        with pytest.raises(ConfigError, match=r"\(backend\(s\) l\); restart llmroute serve"):
            _check_launch(with_engine, other)


async def test_admin_reload_is_404_on_an_app_that_cannot_reload():
    async with open_router(make_config([REMOTE])) as (_, client):
        resp = await client.post("/admin/reload")
    assert resp.status_code == 404 and "llmroute serve" in resp.json()["error"]["message"]


def test_the_reload_command_without_a_router_exits_2(capsys):
    assert main(["reload", "--url", "http://127.0.0.1:9"]) == 2
    assert "POST http://127.0.0.1:9/admin/reload" in capsys.readouterr().err
