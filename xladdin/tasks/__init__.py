"""Tasks: what is asked of the model. One module per task."""

from .base import Provenance, Task, validate_input
from .screen import ScreenExtraction, ScreenResult, ScreenTask, StockSample

__all__ = ["Provenance", "ScreenExtraction", "ScreenResult", "ScreenTask", "StockSample", "Task", "validate_input"]
