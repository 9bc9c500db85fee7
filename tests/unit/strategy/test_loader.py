"""Strategy files: models, the schema, and every load error naming file:line: field."""

from __future__ import annotations

import json

import pytest
from llmroute.errors import ConfigError
from llmroute.strategy.registry import Kind, register_builtins
from llmroute.strategy.single import SingleSpec, build_single


def strategy_yaml(sid: str, extra: str = "", **kw: object) -> str:
    return f"strategy_id: {sid}\nversion: {kw.get('version', 1)}\npriority: " \
        f"{kw.get('priority', 0)}\nkind: single\npool: long\nwhen: {{}}\n{extra}"


def test_a_valid_directory_loads_every_file_best_first(loader, write, tmp_path):
    write("a.yaml", strategy_yaml("a", priority=1))
    write("b.yml", strategy_yaml("b", priority=5, version=2.5))
    write("c.json", json.dumps({"strategy_id": "c", "version": 3, "kind": "single",
                                "pool": "code", "when": {"keywords": ["def "]}}, indent="\t"))
    write("notes.txt", "not a strategy")
    loaded = loader.load_dir(tmp_path)
    assert [e.header for e in loaded.entries] == ["b@2.5", "a@1", "c@3"]
    assert loaded.builtin.header == "builtin-single@0"


@pytest.mark.parametrize(("text", "expected"), [
    ("strategy_id: a\nversion: 1\nkind: single\nwhen:\n  intents: [code]\n  bogus: 1\n",
     "s.yaml:6: when.bogus: Extra inputs are not permitted"),
    ("strategy_id: a\nversion: 1\nkind: single\npool: nowhere\n",
     "s.yaml:4: pool: unknown pool 'nowhere'"),
    ("strategy_id: a\nversion: 1\nkind: single\nintents:\n  code: nowhere\n",
     "s.yaml:5: intents.code: unknown pool 'nowhere'"),
    ("strategy_id: a\nversion: 1\nkind: sparkle\n", "s.yaml:3: kind: unknown kind 'sparkle'"),
    ("strategy_id: a\nversion: '2'\nkind: single\n", "s.yaml:2: version: Input should be"),
    ("strategy_id: a\nversion: 1\nkind: single\nwhen: {regex: '(('}\n",
     "s.yaml:4: when.regex: Value error, regex does not compile"),
    ("strategy_id: a\nversion: 1\nkind: single\nwhen:\n  complexity: {min: 3, max: 1}\n",
     "s.yaml:5: when.complexity: Value error, min (3.0) is above max (1.0)"),
    ("strategy_id: a\nversion: 1\nkind: single\nwhen: {keywords: ['']}\n",
     "s.yaml:4: when.keywords: Value error, a keyword is empty"),
    ("strategy_id: 'bad id'\nversion: 1\nkind: single\n", "s.yaml:1: strategy_id: String"),
    ("version: 1\nkind: single\n", "s.yaml:1: strategy_id: Field required"),
    ("strategy_id: a\n  version: 1\n", "s.yaml:2: invalid YAML"),
    ("- a\n- b\n", "s.yaml:1: a strategy file holds one mapping"),
], ids=["unknown-field", "unknown-pool", "unknown-intent-pool", "unknown-kind",
        "version-not-number", "bad-regex", "inverted-range", "empty-keyword", "bad-id",
        "missing-id", "yaml-syntax", "not-a-mapping"])
def test_a_bad_file_is_named_with_line_and_field(loader, write, tmp_path, text, expected):
    write("s.yaml", text)
    with pytest.raises(ConfigError) as info:
        loader.load_dir(tmp_path)
    assert info.value.message.startswith(f"{tmp_path / expected.split(':')[0]}:")
    assert expected.split(":", 1)[1] in info.value.message


def test_a_json_file_reports_its_lines_too(loader, write, tmp_path):
    write("j.json", '{\n\t"strategy_id": "j",\n\t"version": 1,\n\t"kind": "single",\n'
          '\t"pool": "nowhere"\n}\n')
    with pytest.raises(ConfigError, match=r"j\.json:5: pool: unknown pool"):
        loader.load_dir(tmp_path)


def test_every_bad_file_is_reported_at_once(loader, write, tmp_path):
    write("a.yaml", "strategy_id: a\nversion: 1\nkind: single\npool: x\n")
    write("b.yaml", "strategy_id: b\nversion: -1\nkind: single\n")
    with pytest.raises(ConfigError) as info:
        loader.load_dir(tmp_path)
    assert [line.split(": ")[0] for line in info.value.message.splitlines()] == \
        [f"{tmp_path}/a.yaml:4", f"{tmp_path}/b.yaml:2"]


@pytest.mark.parametrize(("files", "expected"), [
    ({"a.yaml": strategy_yaml("same"), "b.yaml": strategy_yaml("same")},
     "b.yaml:1: strategy_id: duplicate strategy id 'same' (also in"),
    ({"a.yaml": strategy_yaml("a", extra="fallback_strategy: ghost\n")},
     "a.yaml:7: fallback_strategy: unknown strategy 'ghost'"),
    ({"a.yaml": strategy_yaml("a", extra="fallback_strategy: b\n"),
      "b.yaml": strategy_yaml("b", extra="fallback_strategy: c\n"),
      "c.yaml": strategy_yaml("c", extra="fallback_strategy: a\n")},
     "a.yaml:7: fallback_strategy: fallback_strategy cycle: a → b → c → a"),
    ({"a.yaml": strategy_yaml("a", extra="fallback_strategy: a\n")},
     "fallback_strategy cycle: a → a"),
], ids=["duplicate-id", "unknown-fallback", "fallback-cycle", "self-fallback"])
def test_cross_file_problems_are_refused(loader, write, tmp_path, files, expected):
    for name, text in files.items():
        write(name, text)
    with pytest.raises(ConfigError) as info:
        loader.load_dir(tmp_path)
    assert expected in info.value.message


def test_a_fallback_chain_ending_in_the_builtin_is_fine(loader, write, tmp_path):
    write("a.yaml", strategy_yaml("a", extra="fallback_strategy: b\n"))
    write("b.yaml", strategy_yaml("b", extra="fallback_strategy: builtin-single\n"))
    assert len(loader.load_dir(tmp_path).entries) == 2


def test_a_missing_directory_is_a_config_error(loader, tmp_path):
    with pytest.raises(ConfigError, match="cannot read the strategies directory"):
        loader.load_dir(tmp_path / "absent")


def test_the_schema_is_generated_from_the_models_and_forbids_unknown_fields():
    schema = register_builtins().schema()
    assert schema["title"] == "llmroute strategy"
    assert schema["additionalProperties"] is False
    assert {"strategy_id", "version", "when", "kind", "pool", "fallback_strategy"} <= \
        set(schema["properties"])
    assert schema["properties"]["version"]["type"] == "number"
    assert schema["$defs"]["When"]["additionalProperties"] is False


def test_a_kind_registers_once():
    registry = register_builtins()
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Kind("single", SingleSpec, build_single))
    assert registry.names == ("single", "human", "verify", "pipeline",
                              "cascade", "fusion", "split", "shadow")
