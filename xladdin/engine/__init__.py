"""Engines: how a request reaches a model.

Engines are registered as entry points of the group ``xladdin.engines`` (name → "module:Class"),
the built-ins through the same group as any other package's (this project's ``pyproject.toml``), as
``llm`` loads its built-in models through the plugin manager that loads plugins. Every engine is
built from that registry: the ``engine`` setting names one, or ``auto`` picks ``openai_http`` when an
engine URL is configured, else ``embedded``. Each engine is built from its own pydantic options alone
(``options_model``: for a built-in, the settings' section of its name; unknown keys are errors).
"""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points

from ..errors import ConfigError
from ..settings import Settings
from .base import Engine, EngineOptions, SamplingParams, Started

GROUP = "xladdin.engines"
# the built-ins, as pyproject.toml registers them: used as they are when the package's metadata is not
# installed (a source tree on the path)
BUILT_IN: dict[str, str] = {
    "openai_http": "xladdin.engine.openai_http:OpenAIHTTPEngine",
    "embedded": "xladdin.engine.embedded:EmbeddedEngine",
}


@functools.cache
def registered() -> dict[str, str]:
    """Every engine installed: name → "module:Class" (the built-ins first, then other packages')."""
    found = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    return {**BUILT_IN, **{name: value for name, value in found.items() if name not in BUILT_IN}}


def __getattr__(name: str):  # ``ENGINES``: the registry as it is now
    if name == "ENGINES":
        return registered()
    raise AttributeError(name)


def engine_class(kind: str) -> type[Engine]:
    module, _, cls = registered()[kind].partition(":")
    try:
        found = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"engine {kind!r} ({registered()[kind]}) cannot be loaded: {e}") from None
    if not (isinstance(found, type) and issubclass(found, Engine)):
        raise ConfigError(f"engine {kind!r} ({registered()[kind]}) is not an xladdin Engine")
    return found


def engine_kind(settings: Settings) -> str:
    if settings.engine == "auto":
        return "openai_http" if settings.openai_http.url else "embedded"
    engines = registered()
    if settings.engine not in engines:
        raise ConfigError(f"unknown engine {settings.engine!r} (XLADDIN_ENGINE); known: auto, {', '.join(engines)}")
    return settings.engine


def build_engine(settings: Settings) -> Engine:
    """The engine ``settings`` name, built from its options model alone (``options_model``: a built-in's
    section of the settings; another package's engine gets the options every engine shares, validated by
    its own model)."""
    kind = engine_kind(settings)
    cls = engine_class(kind)
    options = settings.options_for(kind)
    if not isinstance(options, cls.options_model):
        options = cls.options_model.model_validate(options.model_dump())
    return cls(options)  # type: ignore[call-arg]


__all__ = ["ENGINES", "Engine", "EngineOptions", "SamplingParams", "Started", "build_engine", "engine_class",
           "engine_kind", "registered"]
