"""xladdin: a local Qwen model that works like an Excel function.

Its names are imported when first used (a report reader process imports only what reading needs)."""

from __future__ import annotations

from .errors import (
    ConfigError,
    EngineError,
    EngineOffline,
    EngineTimeout,
    InputError,
    ModelUnavailable,
    OutputError,
    XladdinError,
)
from .lazy import lazy
from .version import __version__

_LAZY = {
    "Batcher": ".core",
    "Cache": ".core",
    "cache_key": ".core",
    "compare": ".jobs.dataframes",
    "highlights": ".jobs.dataframes",
    "screen": ".jobs.dataframes",
    "Settings": ".settings",
    "ScreenResult": ".tasks",
    "ScreenTask": ".tasks",
    "StockSample": ".tasks",
    "DEFAULT_RULES": ".tasks.rules",
    "Flag": ".tasks.rules",
    "RiskLevel": ".tasks.rules",
    "Rules": ".tasks.rules",
    "assess": ".tasks.rules",
}

__all__ = [
    "DEFAULT_RULES",
    "Batcher",
    "Cache",
    "ConfigError",
    "EngineError",
    "EngineOffline",
    "EngineTimeout",
    "Flag",
    "InputError",
    "ModelUnavailable",
    "OutputError",
    "RiskLevel",
    "Rules",
    "ScreenResult",
    "ScreenTask",
    "Settings",
    "StockSample",
    "XladdinError",
    "__version__",
    "assess",
    "cache_key",
    "compare",
    "highlights",
    "screen",
]


__getattr__, __dir__ = lazy(__name__, _LAZY)
