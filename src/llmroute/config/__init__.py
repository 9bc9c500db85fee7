"""Configuration: pydantic models, one module per section, and YAML loading whose errors
name ``file:line: field``.

* ``base.py`` — ``Strict``, the one base model (unknown fields are errors; frozen);
* ``root.py`` — ``Config`` (the whole file: timeouts, retry, breaker, fuse, backends, pools,
  routing, gate, strategies) and ``load_config`` / ``parse_config``;
* ``anchor.py`` (``anchor:``), ``policy.py`` (``auth:``, ``limits:``, ``state:``,
  ``priority:``, ``tokens:``), ``server.py`` (``server:``), ``filter.py``
  (``content_filter:``), ``observe.py`` (``observe:``), ``discovery.py`` (``discovery:``),
  ``engine.py`` (a backend's ``launch:`` / ``gpu:``), ``quirks.py`` (a backend's ``quirks:``),
  ``quality.py`` (``quality:``, quality ejection);
* ``yaml.py`` — YAML reading and the ``file:line: field`` error text.

The names most callers need are re-exported here. With no file, the embedded default
(``local/default.yaml``) starts three local engines.
"""

from llmroute.config.anchor import AnchorConfig
from llmroute.config.root import (
    EMBEDDED,
    RELOADED_SECTIONS,
    BackendConfig,
    BreakerConfig,
    Config,
    DegradationConfig,
    EntropyConfig,
    FuseConfig,
    GateConfig,
    PoolConfig,
    RetryConfig,
    RoutingConfig,
    SlowConfig,
    StrategiesConfig,
    TimeoutConfig,
    load_config,
    parse_config,
)

__all__ = ["EMBEDDED", "RELOADED_SECTIONS", "AnchorConfig", "BackendConfig", "BreakerConfig",
           "Config", "DegradationConfig", "EntropyConfig", "FuseConfig", "GateConfig",
           "PoolConfig", "RetryConfig", "RoutingConfig", "SlowConfig", "StrategiesConfig",
           "TimeoutConfig",
           "load_config", "parse_config"]
