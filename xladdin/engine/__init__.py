"""Engines: how a request reaches a model.

Built-in engines are registered in ``ENGINES`` like any other (name → "module:Class"), and
every engine is built from it: the ``engine`` setting names one, or ``auto`` picks
``openai_http`` when an engine URL is configured, else ``embedded``. Each engine reads its own
pydantic options (``options_model``: the settings' section of the engine's name; unknown keys
are errors).
"""

from __future__ import annotations

import importlib

from ..errors import ConfigError
from ..settings import Settings
from .base import Engine, EngineOptions, SamplingParams, response_format

ENGINES: dict[str, str] = {
    "openai_http": "xladdin.engine.openai_http:OpenAIHTTPEngine",
    "embedded": "xladdin.engine.embedded:EmbeddedEngine",
}


def engine_class(kind: str) -> type[Engine]:
    module, _, cls = ENGINES[kind].partition(":")
    return getattr(importlib.import_module(module), cls)


def engine_kind(settings: Settings) -> str:
    if settings.engine == "auto":
        return "openai_http" if settings.openai_http.url else "embedded"
    if settings.engine not in ENGINES:
        raise ConfigError(f"unknown engine {settings.engine!r} (XLADDIN_ENGINE); known: auto, {', '.join(ENGINES)}")
    return settings.engine


def build_engine(settings: Settings) -> Engine:
    return engine_class(engine_kind(settings))(settings)  # type: ignore[call-arg]


__all__ = ["ENGINES", "Engine", "EngineOptions", "SamplingParams", "build_engine", "engine_class", "engine_kind",
           "response_format"]
