"""Tasks: what is asked of the model. One module per task; the screening rules (``rules``).

Each name is imported when first used: a module that needs one task (or none: a report reader process
reads with ``reading``) imports only that one."""

from __future__ import annotations

from ..lazy import lazy

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


__getattr__, __dir__ = lazy(__name__, _LAZY)
