"""Engines: how a request reaches a model.

Built-in engines are registered in ``ENGINES`` like any other (name → "module:Class").
``build_engine`` picks ``openai_http`` when an engine URL is configured, else ``embedded``.
"""

from __future__ import annotations

import importlib

from ..settings import Settings
from .base import Engine, SamplingParams, response_format

ENGINES: dict[str, str] = {
    "openai_http": "xladdin.engine.openai_http:OpenAIHTTPEngine",
    "embedded": "xladdin.engine.embedded:EmbeddedEngine",
}


def engine_class(kind: str) -> type[Engine]:
    module, _, cls = ENGINES[kind].partition(":")
    return getattr(importlib.import_module(module), cls)


def build_engine(settings: Settings) -> Engine:
    kind = "openai_http" if settings.engine_url else "embedded"
    return engine_class(kind)(settings)  # type: ignore[call-arg]


__all__ = ["ENGINES", "Engine", "SamplingParams", "build_engine", "engine_class", "response_format"]
