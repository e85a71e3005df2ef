"""xladdin: a local Qwen model that works like an Excel function.

Its names are imported when first used (a report reader process imports only what reading needs)."""

from __future__ import annotations

import importlib
from typing import Any

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
from .version import __version__

_LAZY = {
    "Batcher": ".core.batcher",
    "Cache": ".core.cache",
    "cache_key": ".core.cache",
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'xladdin' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
