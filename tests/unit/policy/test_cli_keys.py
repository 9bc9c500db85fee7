"""``llmroute keys …`` and ``llmroute tenants …`` on the store the config names."""

from __future__ import annotations

import json

from llmroute.cli.main import main


def test_keys_and_tenants_round_trip(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("pools: {general: {}}\nbackends: [{id: a, pool: general, engine: vllm, "
                   "base_url: 'http://127.0.0.1:9'}]\nrouting: {default_pool: general}\n"
                   f"auth: {{keys_path: {tmp_path / 'k.db'}}}\n")

    def cli(*argv: str) -> object:
        assert main([*argv, "--config", str(cfg)]) == 0
        return json.loads(capsys.readouterr().out)

    assert cli("tenants", "create", "acme", "--tpm", "1000")["limits"]["tpm"] == 1000
    made = cli("keys", "create", "--tenant", "acme", "--rpm", "5", "--pool", "general",
               "--metadata", '{"team": "search"}')
    secret, key_id = made["key"], made["record"]["id"]
    assert made["record"]["limits"]["rpm"] == 5 and made["record"]["pools"] == ["general"]
    rotated = cli("keys", "rotate", key_id)
    assert rotated["key"] != secret and rotated["record"]["metadata"] == {"team": "search"}
    assert cli("keys", "show", key_id)["revoked_at"] is not None
    listed = cli("keys", "list", "--tenant", "acme")
    assert [k["id"] for k in listed] == [key_id, rotated["record"]["id"]]
    assert secret not in json.dumps(listed)
    assert cli("keys", "revoke", rotated["record"]["id"])["revoked_at"] is not None
    assert [t["id"] for t in cli("tenants", "list")] == ["acme"]
    assert main(["keys", "create", "--tenant", "nobody", "--config", str(cfg)]) == 2
    assert main(["keys", "revoke", key_id, "--config", str(cfg)]) == 2
