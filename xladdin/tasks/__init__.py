"""Tasks: what is asked of the model. One module per task; the screening rules (``rules``)."""

from .ask import AskResult, AskTask
from .base import Provenance, Task, validate_input
from .classify import ClassifyResult, ClassifyTask
from .extract import ExtractResult, ExtractTask
from .highlights import HighlightsResult, HighlightsTask
from .screen import ScreenExtraction, ScreenResult, ScreenTask, StockSample

__all__ = [
    "AskResult",
    "AskTask",
    "ClassifyResult",
    "ClassifyTask",
    "ExtractResult",
    "ExtractTask",
    "HighlightsResult",
    "HighlightsTask",
    "Provenance",
    "ScreenExtraction",
    "ScreenResult",
    "ScreenTask",
    "StockSample",
    "Task",
    "validate_input",
]
