"""One settings object, read from defaults < TOML file < ``XLADDIN_*`` env vars < explicit overrides.

The TOML file is ``$XLADDIN_CONFIG`` if set, else ``<config dir>/xladdin/config.toml``
when it exists. Unknown keys are errors, not silent defaults.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError


def _user_dir(kind: str) -> Path:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "xladdin" / kind
    if kind == "config":
        return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "xladdin"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xladdin" / kind


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

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

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        config_path = env.get("XLADDIN_CONFIG")
        path = Path(config_path) if config_path else _user_dir("config") / "config.toml"
        if path.is_file():
            try:
                values.update(tomllib.loads(path.read_text(encoding="utf-8")))
            except tomllib.TOMLDecodeError as e:
                raise ConfigError(f"config file {path}: {e}") from None
        elif config_path:
            raise ConfigError(f"config file not found: {path} (from XLADDIN_CONFIG)")
        for name in cls.model_fields:
            raw = env.get("XLADDIN_" + name.upper())
            if raw not in (None, ""):
                values[name] = raw
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "settings"
            raise ConfigError(f"setting {where}: {err['msg']} (XLADDIN_{where.upper()})") from None
