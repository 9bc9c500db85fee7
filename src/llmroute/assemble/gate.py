"""``make_gate(config)``: the gate the config's ``gate.kind`` asks for (no I/O)."""

from __future__ import annotations

from llmroute.config import Config
from llmroute.gate.off import NoGate
from llmroute.gate.protocol import Gate
from llmroute.gate.rules import RulesGate


def make_gate(config: Config) -> Gate:
    """``SemanticGate`` (default), ``RulesGate`` with the config's rules, or ``NoGate``
    (``kind: off``); the config file's watcher swaps their rules (``assemble/watch.py``).
    Raises ConfigError for bad rules."""
    if config.gate.kind == "off":
        return NoGate()
    if config.gate.kind == "rules":
        return RulesGate(config.gate.rules)
    from llmroute.gate.semantic import SemanticGate  # scikit-learn: imported only when used

    return SemanticGate(config.gate, pools=tuple(config.pools))
