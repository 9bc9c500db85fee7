"""``make_gate(config)``: the gate the config's ``gate.kind`` asks for (no I/O)."""

from __future__ import annotations

from pathlib import Path

from llmroute.config import Config
from llmroute.gate.off import NoGate
from llmroute.gate.protocol import Gate
from llmroute.gate.rules import RulesGate


def make_gate(config: Config) -> Gate:
    """``SemanticGate`` (default; watches the config file for rule changes when it is one),
    ``RulesGate`` with the config's rules, or ``NoGate`` (``kind: off``). Raises ConfigError
    for bad rules."""
    if config.gate.kind == "off":
        return NoGate()
    if config.gate.kind == "rules":
        return RulesGate(config.gate.rules)
    from llmroute.gate.semantic import SemanticGate  # scikit-learn: imported only when used

    source = Path(config.source)
    return SemanticGate(config.gate, config_path=source if source.is_file() else None)
