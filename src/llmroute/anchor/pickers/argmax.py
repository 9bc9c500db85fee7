"""argmax: highest score first; ties broken by the order the backends were given."""

from __future__ import annotations


class ArgmaxPicker:
    """Orders by descending score; equal scores keep their insertion order (deterministic)."""

    name = "argmax"

    def pick(self, scored: dict[str, float]) -> list[str]:
        order = {bid: i for i, bid in enumerate(scored)}
        return sorted(scored, key=lambda bid: (-scored[bid], order[bid]))
