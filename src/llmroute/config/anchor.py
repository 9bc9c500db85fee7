"""The ``anchor:`` section of the config (``config/root.py`` loads it): which plugins run, and
each plugin's own parameters.

A plugin instance is ``{type, weight, params}``, as in GIE's plugin config: ``type`` is the
registry's kebab-case name (``anchor/registry.py``), ``weight`` a scorer's share of the total
and ``params`` the plugin's own settings, validated by its own model (``PLUGIN_PARAMS``; a
plugin not listed there takes none, and any name under its ``params`` is an error naming
``file:line: field``). Entries are keyed by their type, one map per kind::

    anchor:
      preset: default
      scorers: {prefix-affinity: 0.2, kv-cache: {weight: 0.5}}   # a weight, or {weight, params}
      filters: {ttft-headroom: {params: {factor: 2, slack_ms: 500, keep: 2}}}
      picker: softmax
      pickers: {softmax: {params: {temperature: 0.2}}}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializeAsAny,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llmroute.config.base import Strict

Kind = Literal["filter", "scorer", "picker"]


class NoParams(Strict):
    """The params of a plugin that takes none: any name given is an error."""


class ContextFitParams(Strict):
    """``context-fit`` filter: above ``kv_threshold`` (fraction 0–1) of the KV cache in use,
    the usable context shrinks linearly to ``kv_min_fraction`` of the window at a full
    cache (``anchor/filters/context_fit.py``)."""

    kv_threshold: float = Field(0.8, ge=0, lt=1)
    kv_min_fraction: float = Field(0.5, gt=0, le=1)


class TtftHeadroomParams(Strict):
    """``ttft-headroom`` filter: keeps backends predicted within ``factor`` × the soonest
    predicted TTFT or ``slack_ms`` ms of it, and at least the ``keep`` soonest
    (``anchor/filters/ttft_headroom.py``)."""

    factor: float = Field(3.0, ge=1)
    slack_ms: float = Field(1000.0, ge=0)
    keep: int = Field(3, ge=1)


class SampleParams(Strict):
    """``sample`` filter (after the cheap filters of every preset, before ``ttft-headroom``):
    when more than ``above`` backends survive them, score only ``size`` of them — the longest prefix holders
    and a random rest (``anchor/filters/sample.py``)."""

    above: int = Field(128, ge=1)
    size: int = Field(64, ge=1)


class PrefixAffinityParams(Strict):
    """``prefix-affinity`` scorer, and the router-side prefix index it reads
    (``anchor/affinity.py``): keys of ``block_tokens`` tokens (a multiple of the engines'
    block size; 3 characters a token), at most ``max_blocks`` per prompt and ``capacity``
    per backend (the index's memory bound); ``events``: read the KV-cache events of the
    backends that publish them (``kv_events``); ``priced``: no credit for a backend whose
    predicted TTFT, priced on its uncached prompt, is over 1.1 × the soonest
    (``anchor/scorers/prefix_affinity.py``; false: affinity alone, as GIE's scorer)."""

    block_tokens: int = Field(256, ge=1)
    max_blocks: int = Field(512, ge=1)
    capacity: int = Field(16384, ge=1)
    events: bool = True
    priced: bool = True


class SoftmaxParams(Strict):
    """``softmax`` picker: the sampling ``temperature``, in units of total score."""

    temperature: float = Field(0.1, gt=0)


PLUGIN_PARAMS: Mapping[Kind, Mapping[str, type[BaseModel]]] = {
    "filter": {"context-fit": ContextFitParams, "ttft-headroom": TtftHeadroomParams,
               "sample": SampleParams},
    "scorer": {"prefix-affinity": PrefixAffinityParams},
    "picker": {"softmax": SoftmaxParams},
}
"""Each plugin's params model by kind and type name; a plugin not listed takes none."""

FLAT_KEYS: Mapping[str, tuple[Kind, str, str]] = {
    "softmax_temperature": ("picker", "softmax", "temperature"),
    "kv_pressure_threshold": ("filter", "context-fit", "kv_threshold"),
    "kv_pressure_min_fraction": ("filter", "context-fit", "kv_min_fraction"),
    "ttft_headroom_factor": ("filter", "ttft-headroom", "factor"),
    "ttft_headroom_ms": ("filter", "ttft-headroom", "slack_ms"),
    "ttft_headroom_keep": ("filter", "ttft-headroom", "keep"),
}
"""The older flat ``anchor:`` keys, each another spelling of one plugin param:
``key → (kind, type, param)``."""


class PluginConfig(Strict):
    """One plugin instance (module docstring): its ``type`` (the key it is given under) and
    its ``params``, an instance of the plugin's own params model."""

    kind: ClassVar[Kind] = "filter"
    type: str
    params: SerializeAsAny[BaseModel] = Field(default_factory=dict, validate_default=True)

    @field_validator("params", mode="before")
    @classmethod
    def _own_params(cls, value: Any, info: ValidationInfo) -> BaseModel:
        model = PLUGIN_PARAMS[cls.kind].get(info.data.get("type", ""), NoParams)
        return value if isinstance(value, model) else model.model_validate(value)


class ScorerConfig(PluginConfig):
    """A scorer instance: ``weight`` (0 removes it; a negative weight penalises the
    complement, ``anchor/profile.py``) and ``params``."""

    kind: ClassVar[Kind] = "scorer"
    weight: float


class PickerConfig(PluginConfig):
    """A picker instance's ``params`` (``anchor.picker`` says which picker runs)."""

    kind: ClassVar[Kind] = "picker"


class AnchorConfig(Strict):
    """The resource anchor.

    Which plugins run: a ``preset`` (default | round-robin | least-in-flight | seed-000 |
    seed-001; ``anchor/presets.py``), ``scorers`` merged over its weights (an entry sets or
    adds that scorer; weight 0 removes it), a ``picker`` type (argmax | p2c | softmax |
    round-robin; None: the preset's) and ``ttft_headroom`` (the ttft-headroom filter on or
    off; None: as the preset has it — on in ``default``).

    Each plugin's own settings: the entries in ``filters``, ``scorers`` (``{type: weight}``
    for short) and ``pickers`` (module docstring). The flat keys ``softmax_temperature``,
    ``kv_pressure_threshold``, ``kv_pressure_min_fraction``, ``ttft_headroom_factor``,
    ``ttft_headroom_ms`` and ``ttft_headroom_keep`` are another spelling of one param each
    (``FLAT_KEYS``; giving both spellings is an error).

    The signal collector: its period, per-poll timeout and the age after which a signal is
    stale (seconds). The thermal latch (``anchor/readings.py``): a GPU read at or above
    ``thermal_limit_c`` (°C; None turns the thermal filter off) takes no new requests while
    another backend can, until it reads ``thermal_hysteresis_c`` below the limit."""

    preset: Literal["default", "round-robin", "least-in-flight", "seed-000", "seed-001"] = \
        "default"
    scorers: dict[str, ScorerConfig] = {}
    filters: dict[str, PluginConfig] = {}
    pickers: dict[str, PickerConfig] = {}
    picker: Literal["argmax", "p2c", "softmax", "round-robin"] | None = None
    ttft_headroom: bool | None = None
    poll_interval_s: float = Field(0.2, gt=0)
    poll_timeout_s: float = Field(0.5, gt=0)
    stale_after_s: float = Field(2.0, gt=0)
    thermal_limit_c: float | None = Field(78.0, gt=0, le=130)
    thermal_hysteresis_c: float = Field(3.0, ge=0, le=30)
    softmax_temperature: float = SoftmaxParams.model_fields["temperature"]
    kv_pressure_threshold: float = ContextFitParams.model_fields["kv_threshold"]
    kv_pressure_min_fraction: float = ContextFitParams.model_fields["kv_min_fraction"]
    ttft_headroom_factor: float = TtftHeadroomParams.model_fields["factor"]
    ttft_headroom_ms: float = TtftHeadroomParams.model_fields["slack_ms"]
    ttft_headroom_keep: int = TtftHeadroomParams.model_fields["keep"]

    @field_validator("scorers", "filters", "pickers", mode="before")
    @classmethod
    def _keyed_by_type(cls, value: Any, info: ValidationInfo) -> Any:
        """Each entry's ``type`` is its key; a scorer may be given as just its weight."""
        if not isinstance(value, dict):
            return value
        weighted = info.field_name == "scorers"
        return {name: _entry(name, entry, weighted) for name, entry in value.items()}

    @model_validator(mode="after")
    def _one_spelling(self) -> AnchorConfig:
        for key, (kind, name, param) in FLAT_KEYS.items():
            entry = self.entries(kind).get(name)
            if key in self.model_fields_set and entry is not None \
                    and param in entry.params.model_fields_set:
                raise ValueError(f"{key} and {kind}s.{name}.params.{param} are one setting: "
                                 "give one of them")
        return self

    def entries(self, kind: Kind) -> Mapping[str, PluginConfig]:
        """The configured instances of ``kind``, by type."""
        return {"filter": self.filters, "scorer": self.scorers, "picker": self.pickers}[kind]

    def params(self, kind: Kind, name: str) -> BaseModel:
        """Plugin ``name``'s params (an instance of its ``PLUGIN_PARAMS`` model, else
        ``NoParams``): its entry's ``params`` over the flat keys' values over its defaults."""
        model = PLUGIN_PARAMS[kind].get(name, NoParams)
        flat = {param: getattr(self, key) for key, (k, n, param) in FLAT_KEYS.items()
                if (k, n) == (kind, name)}
        entry = self.entries(kind).get(name)
        given = entry.params.model_dump(exclude_unset=True) if entry is not None else {}
        return model.model_validate({**flat, **given})


def _entry(name: str, entry: Any, weighted: bool) -> Any:
    """``entry`` (given under ``name``) with its ``type``; for a ``weighted`` kind (scorers)
    a bare value is the weight."""
    if isinstance(entry, dict):
        return {**entry, "type": name}
    if weighted and not isinstance(entry, BaseModel):
        return {"type": name, "weight": entry}
    return entry
