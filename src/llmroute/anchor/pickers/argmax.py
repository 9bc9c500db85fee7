"""argmax: highest score first; ties broken by the order the backends were given."""

from __future__ import annotations


class ArgmaxPicker:
    """Orders by descending score; equal scores keep their insertion order (deterministic)."""

    name = "argmax"

    def pick(self, scored: dict[str, float]) -> list[str]:
        """Every key once, best first. Python's sort is stable also with ``reverse=True``
        (equal keys keep their original order), which gives the tie-break."""
        return sorted(scored, key=scored.__getitem__, reverse=True)
