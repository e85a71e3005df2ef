"""Tasks: what is asked of the model. One module per task; the screening rules (``rules``).

Each name is imported when first used (a report reader process needs ``tables`` and ``figures`` only)."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "AskResult": ".ask",
    "AskTask": ".ask",
    "ClassifyResult": ".classify",
    "ClassifyTask": ".classify",
    "ExtractResult": ".extract",
    "ExtractTask": ".extract",
    "HighlightsResult": ".highlights",
    "HighlightsTask": ".highlights",
    "Provenance": ".base",
    "ScreenExtraction": ".screen",
    "ScreenResult": ".screen",
    "ScreenTask": ".screen",
    "StockSample": ".screen",
    "Task": ".base",
    "validate_input": ".base",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'xladdin.tasks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
