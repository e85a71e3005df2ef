"""One settings object, read from defaults < TOML file < ``XLADDIN_*`` env vars < explicit overrides.

pydantic-settings does the layering. The TOML file is ``$XLADDIN_CONFIG`` if set, else
``<config dir>/xladdin/config.toml`` when it exists. Unknown keys in it are errors, not silent
defaults; an ``XLADDIN_*`` variable that names no setting is a warning naming the closest one.
Engines and sampling take their options from here (``EngineOptions.from_settings``,
``Settings.sampling``): each setting has one default, this one.
"""

from __future__ import annotations

import contextvars
import difflib
import logging
import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from .errors import ConfigError, first_error

log = logging.getLogger("xladdin")
# XLADDIN_* variables that are not settings but are read elsewhere
OTHER_VARIABLES = frozenset({"XLADDIN_CONFIG", "XLADDIN_HUB_URL"})
_SOURCES: contextvars.ContextVar[tuple[Mapping[str, str], Path | None]] = contextvars.ContextVar("xladdin_sources")


def _user_dir(kind: str) -> Path:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "xladdin" / kind
    if kind == "config":
        return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "xladdin"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xladdin" / kind


class _Environment(EnvSettingsSource):
    """``XLADDIN_*`` variables from the mapping ``Settings.load`` was given (``os.environ`` by default)."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env, _ = _SOURCES.get((os.environ, None))
        return {k.lower(): v for k, v in env.items() if v != ""}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="XLADDIN_", extra="forbid", frozen=True)

    engine: str = Field("auto", description="auto (URL → openai_http, else embedded), or a registered engine's name")
    engine_url: str | None = Field(None, description="server URL, e.g. http://gpu:8000/v1 (or URL1,URL2)")
    api_key: str | None = Field(None, description="API key sent to (or required by) a server")
    model: str | None = Field(None, description="GGUF path or hub id for the embedded engine")
    served_model: str | None = Field(None, description="model name on the server (default: its first model)")
    cache_dir: Path = Field(default_factory=lambda: _user_dir("cache"))
    models_dir: Path = Field(default_factory=lambda: _user_dir("models"))
    no_cache: bool = False
    timeout: float = Field(120.0, gt=0, description="seconds for one engine request")
    retries: int = Field(2, ge=0, le=10, description="retries after a failed engine request")
    max_parallel: int | None = Field(None, ge=1, le=1024, description="requests in flight (default: engine slots)")
    batch_window_ms: float = Field(20.0, ge=0, le=5000)
    n_ctx: int = Field(4096, ge=256, description="embedded engine: context tokens per slot")
    n_threads: int = Field(default_factory=lambda: os.cpu_count() or 2, ge=1)
    prompt_cache_mib: int = Field(
        0,
        ge=0,
        description="embedded engine: RAM for llama.cpp's cross-request prompt cache (0: off; the "
        "per-slot prefix cache that serves the shared system prompt stays on)",
    )
    max_tokens: int = Field(512, ge=16)
    max_text_chars: int | None = Field(None, ge=100, description="at most this many characters of report text "
                                       "for the model (default: what text_tokens and the engine's context hold)")
    text_tokens: int = Field(1500, ge=100, description="at most this many tokens of report text per request "
                             "(lowered to what the engine's context holds)")
    structured_output: bool = Field(True, description="send the JSON schema as response_format (constrained decoding)")
    temperature: float = Field(0.0, ge=0)
    seed: int = 42
    engine_verbose: bool = False

    @property
    def sampling(self) -> SamplingParams:
        """The sampling parameters (part of every cache key) these settings give."""
        return SamplingParams(temperature=self.temperature, seed=self.seed, max_tokens=self.max_tokens)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: Any, env_settings: Any,
                                   dotenv_settings: Any, file_secret_settings: Any) -> tuple[Any, ...]:
        """Explicit overrides first, then ``XLADDIN_*`` variables, then the TOML file."""
        _, path = _SOURCES.get((os.environ, None))
        toml = (TomlConfigSettingsSource(settings_cls, toml_file=path),) if path else ()
        return (init_settings, _Environment(settings_cls), *toml)

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        config_path = env.get("XLADDIN_CONFIG")
        path = Path(config_path) if config_path else _user_dir("config") / "config.toml"
        if not path.is_file():
            if config_path:
                raise ConfigError(f"config file not found: {path} (from XLADDIN_CONFIG)")
            path = None
        _warn_unknown(env)
        token = _SOURCES.set((env, path))
        try:
            return cls(**{k: v for k, v in (overrides or {}).items() if v is not None})
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path}: {e}") from None
        except ValidationError as e:
            shown = first_error(e, "settings")
            raise ConfigError(f"setting {shown} (XLADDIN_{shown.partition(': ')[0].upper()})") from None
        finally:
            _SOURCES.reset(token)


def _warn_unknown(env: Mapping[str, str]) -> None:
    """A warning for each ``XLADDIN_*`` variable that is no setting, naming the closest one."""
    known = {"XLADDIN_" + name.upper() for name in Settings.model_fields} | OTHER_VARIABLES
    for name in sorted(n for n in env if n.upper().startswith("XLADDIN_") and n.upper() not in known):
        close = difflib.get_close_matches(name.upper(), known, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        log.warning("%s is not a setting and is ignored%s", name, hint)


class SamplingParams(BaseModel):
    """What the model is sampled with (part of every cache key); its defaults are the settings' own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(default_factory=lambda: default("temperature"))
    seed: int = Field(default_factory=lambda: default("seed"))
    max_tokens: int = Field(default_factory=lambda: default("max_tokens"))


def default(name: str) -> Any:
    """The one default of setting ``name``, for the option models built from settings."""
    field = Settings.model_fields[name]
    return field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
