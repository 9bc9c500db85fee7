"""Strategy kinds by name: ``register_builtins()`` and the JSON Schema of a strategy file.

A kind is its file model (a ``StrategySpec`` subclass whose ``kind`` is a ``Literal`` of the
name) and a factory ``build(spec, KindContext) -> Strategy`` (no I/O). A new kind is a module
under ``strategy/`` plus one ``register`` line in ``register_builtins``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter

from llmroute.strategy.cascade import CascadeSpec, build_cascade
from llmroute.strategy.fusion import FusionSpec, build_fusion
from llmroute.strategy.human import HumanSpec, build_human
from llmroute.strategy.pipeline import PipelineSpec, build_pipeline
from llmroute.strategy.protocol import KindContext, Strategy
from llmroute.strategy.single import SingleSpec, build_single
from llmroute.strategy.spec import StrategySpec
from llmroute.strategy.split import ShadowSpec, SplitSpec, build_shadow, build_split
from llmroute.strategy.verify import VerifySpec, build_verify

SCHEMA_ID = "https://llmroute.dev/schemas/strategy.json"


@dataclass(frozen=True)
class Kind:
    """One strategy kind: ``name`` (the file's ``kind``), its file model ``spec`` and its
    factory ``build``."""

    name: str
    spec: type[StrategySpec]
    build: Callable[[Any, KindContext], Strategy]


class KindRegistry:
    """Kinds by name. ``register`` raises ValueError for a name registered twice."""

    def __init__(self) -> None:
        self._kinds: dict[str, Kind] = {}

    def register(self, kind: Kind) -> None:
        """Add ``kind``. Raises ValueError when its name is taken."""
        if kind.name in self._kinds:
            raise ValueError(f"strategy kind {kind.name!r} is already registered")
        self._kinds[kind.name] = kind

    def get(self, name: Any) -> Kind | None:
        """The kind called ``name``, or None."""
        return self._kinds.get(name) if isinstance(name, str) else None

    @property
    def names(self) -> tuple[str, ...]:
        """The registered kind names, in registration order."""
        return tuple(self._kinds)

    def schema(self) -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of a strategy file: one of the kinds' models,
        told apart by ``kind``. The top level also lists every field of every kind (the
        shared ones with their schema) and forbids others, so an editor flags a misspelt
        field whatever the kind."""
        specs = [k.spec for k in self._kinds.values()]
        if len(specs) == 1:
            schema = specs[0].model_json_schema()
        else:
            union = Annotated[Union[tuple(specs)], Field(discriminator="kind")]  # noqa: UP007
            schema = TypeAdapter(union).json_schema()
            schema.update(type="object", properties=self._properties(schema),
                          required=["strategy_id", "version", "kind"],
                          additionalProperties=False)
        return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
                **schema, "title": "llmroute strategy"}

    def _properties(self, union: dict[str, Any]) -> dict[str, Any]:
        """Every kind's field names: the shared fields with the first kind's schema, ``kind``
        as the enum of names, the rest unconstrained here (each kind's model checks them)."""
        defs = union.get("$defs", {})
        first = defs[next(iter(self._kinds.values())).spec.__name__]["properties"]
        shared = set(StrategySpec.model_fields) - {"kind"}
        out: dict[str, Any] = {name: first[name] for name in first if name in shared}
        for kind in self._kinds.values():
            out.update({f: {} for f in kind.spec.model_fields if f not in out})
        out["kind"] = {"enum": list(self._kinds)}
        return out


def register_builtins() -> KindRegistry:
    """A registry holding every built-in kind: ``single``, ``human``, ``verify``,
    ``pipeline``, ``cascade``, ``fusion``, ``split``, ``shadow``."""
    registry = KindRegistry()
    registry.register(Kind("single", SingleSpec, build_single))
    registry.register(Kind("human", HumanSpec, build_human))
    registry.register(Kind("verify", VerifySpec, build_verify))
    registry.register(Kind("pipeline", PipelineSpec, build_pipeline))
    registry.register(Kind("cascade", CascadeSpec, build_cascade))
    registry.register(Kind("fusion", FusionSpec, build_fusion))
    registry.register(Kind("split", SplitSpec, build_split))
    registry.register(Kind("shadow", ShadowSpec, build_shadow))
    return registry
