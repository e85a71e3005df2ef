"""One settings object, read from defaults < TOML file < ``XLADDIN_*`` env vars < explicit overrides.

pydantic-settings does the layering. The TOML file is ``$XLADDIN_CONFIG`` if set, else
``<config dir>/xladdin/config.toml`` when it exists. Unknown keys in it are errors, not silent
defaults; an ``XLADDIN_*`` variable that names no setting is a warning naming the closest one.

Settings nest: ``sampling`` (part of every cache key) and one options model per engine
(``openai_http``, ``embedded``: the model the engine of that name is built from, its
``options_model``). Each setting has one default, in the model that holds it. A nested setting is
written ``XLADDIN_SAMPLING__MAX_TOKENS`` or ``[sampling] max_tokens = …``; the short names of
``SHORT`` (``XLADDIN_MAX_TOKENS``, ``XLADDIN_ENGINE_URL``, ``XLADDIN_TIMEOUT`` …) set the same
fields — ``timeout``, ``max_parallel`` and ``structured_output`` those of every engine. Within one
layer the nested name wins over the short one; a higher layer wins either way.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import difflib
import functools
import logging
import os
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict, TomlConfigSettingsSource

from . import periods
from .errors import ConfigError

log = logging.getLogger("xladdin")
# XLADDIN_* variables that are not settings but are read elsewhere
OTHER_VARIABLES = frozenset({"XLADDIN_CONFIG", "XLADDIN_HUB_URL"})
ENGINE_SECTIONS = ("openai_http", "embedded")  # one options model per built-in engine, named as the engine
_SOURCES: contextvars.ContextVar[tuple[Mapping[str, str], Path | None]] = contextvars.ContextVar("xladdin_sources")


def _user_dir(kind: str) -> Path:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "xladdin" / kind
    if kind == "config":
        return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "xladdin"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xladdin" / kind


class SamplingParams(BaseModel):
    """What the model is sampled with (part of every cache key)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature (0: the most likely answer)")
    seed: int = Field(42, ge=0, le=2**31 - 1, description="sampling seed, sent with every request")
    max_tokens: int = Field(512, ge=16, le=32768, description="at most this many tokens per answer")


class EngineOptions(BaseModel):
    """What every engine is configured with; each engine extends it. A typo is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    timeout: float = Field(120.0, gt=0, le=86400, description="seconds for one engine request")
    max_parallel: int | None = Field(None, ge=1, le=4096, description="requests in flight (default: the engine's own)")
    structured_output: bool = Field(True, description="send the JSON schema as response_format (constrained decoding)")


class HTTPOptions(EngineOptions):
    """The ``openai_http`` engine: any OpenAI-compatible server (vLLM, llama.cpp, SGLang)."""

    url: str | None = Field(None, description="server URL, e.g. http://gpu:8000/v1 (or URL1,URL2)")
    api_key: str | None = Field(None, description="API key sent to (or required by) a server")
    served_model: str | None = Field(None, description="model name on the server (default: its first model)")
    retries: int = Field(2, ge=0, le=10, description="retries after a failed engine request")


class EmbeddedOptions(EngineOptions):
    """The ``embedded`` engine: llama.cpp in this process."""

    model: str | None = Field(None, description="GGUF path or hub id for the embedded engine")
    models_dir: Path = Field(default_factory=lambda: _user_dir("models"),
                             description="where a model given as a hub id is downloaded, once")
    n_ctx: int = Field(4096, ge=256, le=1 << 20, description="context tokens per slot")
    n_threads: int = Field(default_factory=lambda: os.cpu_count() or 2, ge=1, le=1024,
                           description="CPU threads of the embedded engine")
    prompt_cache_mib: int = Field(
        0,
        ge=0,
        le=1 << 20,
        description="RAM for llama.cpp's cross-request prompt cache (0: off; the per-slot prefix cache that "
        "serves the shared system prompt stays on)",
    )
    verbose: bool = Field(False, description="show llama.cpp's logs")


# short name → the nested fields it sets (section, field)
SHORT: dict[str, tuple[tuple[str, str], ...]] = {
    "temperature": (("sampling", "temperature"),),
    "seed": (("sampling", "seed"),),
    "max_tokens": (("sampling", "max_tokens"),),
    "engine_url": (("openai_http", "url"),),
    "api_key": (("openai_http", "api_key"),),
    "served_model": (("openai_http", "served_model"),),
    "retries": (("openai_http", "retries"),),
    "model": (("embedded", "model"),),
    "models_dir": (("embedded", "models_dir"),),
    "n_ctx": (("embedded", "n_ctx"),),
    "n_threads": (("embedded", "n_threads"),),
    "prompt_cache_mib": (("embedded", "prompt_cache_mib"),),
    "engine_verbose": (("embedded", "verbose"),),
    **{name: tuple((section, name) for section in ENGINE_SECTIONS) for name in EngineOptions.model_fields},
}


def _nest(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with each short name moved to the nested fields it sets (a nested value given too wins)."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in values.items() if k not in SHORT}
    for name, value in values.items():
        for section, field in SHORT.get(name, ()):
            part = out.setdefault(section, {})
            if isinstance(part, dict):
                part.setdefault(field, value)
    return out


class _Environment(EnvSettingsSource):
    """``XLADDIN_*`` variables from the mapping ``Settings.load`` was given (``os.environ`` by default)."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env, _ = _SOURCES.get((os.environ, None))
        known = known_variables()  # an unknown one is warned about and ignored, nested or not
        found = {k.lower(): v for k, v in env.items() if v != "" and k.upper() in known}
        for key, value in list(found.items()):
            for section, field in SHORT.get(key.removeprefix("xladdin_"), ()) if key.startswith("xladdin_") else ():
                found.setdefault(f"xladdin_{section}__{field}", value)
        return found


class _Toml(TomlConfigSettingsSource):
    def __call__(self) -> dict[str, Any]:
        return _nest(super().__call__())

    def _read_file(self, file_path: Path) -> dict[str, Any]:  # type: ignore[override]
        return tomllib.loads(toml_text(Path(file_path), "config file"))


def toml_text(path: Path, kind: str) -> str:
    """The text of a TOML file: UTF-8 (with or without a BOM), or UTF-16 with its BOM (Windows
    Notepad's "Unicode"); anything else is a ``ConfigError`` naming the file and the fix."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{kind} {path}: cannot read it ({e.strerror or e})") from None
    fix = "save it as UTF-8 text (Notepad: File > Save as, Encoding UTF-8)"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise ConfigError(f"{kind} {path} is not valid UTF-16 text: {fix}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{kind} {path} is not UTF-8 text (byte 0x{data[e.start]:02x} at {e.start}): {fix}") \
            from None
    if "\x00" in text:
        raise ConfigError(f"{kind} {path} is not a text file (it holds NUL bytes): {fix}")
    return text


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="XLADDIN_", env_nested_delimiter="__", extra="forbid", frozen=True,
                                      allow_inf_nan=False)

    engine: str = Field("auto", description="auto (URL → openai_http, else embedded), or a registered engine's name")
    cache_dir: Path = Field(default_factory=lambda: _user_dir("cache"),
                            description="where answers and report texts are kept (the disk cache)")
    no_cache: bool = Field(False, description="ask the engine for every row and keep nothing")
    batch_window_ms: float = Field(20.0, ge=0, le=5000, description="milliseconds requests are gathered into one wave")
    max_text_chars: int | None = Field(None, ge=100, le=10_000_000,
                                       description="at most this many characters of report text "
                                       "for the model (default: what text_tokens and the engine's context hold)")
    text_tokens: int = Field(1500, ge=100, le=1 << 20,
                             description="at most this many tokens of report text per request "
                             "(lowered to what the engine's context holds)")
    report_dirs: Annotated[tuple[Path, ...], NoDecode] = Field(
        (), description="folders report files may also be read from, besides the pool's or workbook's folder and "
        "--reports (XLADDIN_REPORT_DIRS: folders separated by os.pathsep)")
    max_report_mib: float = Field(64, gt=0, le=4096, description="largest report file read, in MiB")
    reader_memory_mib: int = Field(2048, ge=256, le=1 << 20, description="address space of each process reading "
                                   "report files, in MiB: a file that needs more is its row's error, at once")
    readers: int | None = Field(None, ge=1, le=256, description="processes reading report files (default: one "
                                "per CPU core)")
    as_of: dt.date | None = Field(None, description="the workbook cells (QWEN_SCREEN, the Refresh macro) screen as "
                                  "of this day, as --as-of does: no report published after it is used "
                                  "(2021-03-31; the CLI and xladdin.screen take --as-of / as_of= instead)")
    undated_reports: bool = Field(False, description="under an as-of day, use a report whose publication day is not "
                                  "known (flagged 公告日未知); by default it is left out and its row screened on "
                                  "the pool's own fields (--undated-reports)")
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    openai_http: HTTPOptions = Field(default_factory=HTTPOptions)
    embedded: EmbeddedOptions = Field(default_factory=EmbeddedOptions)

    @field_validator("report_dirs", mode="before")
    @classmethod
    def _folders(cls, value: Any) -> Any:
        if isinstance(value, str | Path):
            return tuple(p for p in str(value).split(os.pathsep) if p.strip())
        return value

    @field_validator("as_of", mode="before")
    @classmethod
    def _day(cls, value: Any) -> Any:
        return periods.as_of_day(value)  # 20210331 is that day, not a count of seconds

    def options_for(self, kind: str) -> EngineOptions:
        """The options of engine ``kind``: its own section, or (an engine registered from outside) the
        options every engine shares, as the short names set them."""
        if kind in ENGINE_SECTIONS:
            return getattr(self, kind)
        return EngineOptions(**self.openai_http.model_dump(include=set(EngineOptions.model_fields)))

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: Any, env_settings: Any,
                                   dotenv_settings: Any, file_secret_settings: Any) -> tuple[Any, ...]:
        """Explicit overrides first, then ``XLADDIN_*`` variables, then the TOML file."""
        _, path = _SOURCES.get((os.environ, None))
        toml = (_Toml(settings_cls, toml_file=path),) if path else ()
        return (init_settings, _Environment(settings_cls), *toml)

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from every layer; ``overrides`` (short or nested names, ``None`` values ignored) win."""
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
            return cls(**_nest({k: v for k, v in (overrides or {}).items() if v is not None}))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path}: {e}") from None
        except ValidationError as e:
            raise ConfigError(_explain(e)) from None
        finally:
            _SOURCES.reset(token)


def _explain(e: ValidationError) -> str:
    """The first error as ``setting NAME: reason (XLADDIN_…)``, by its short name where it has one."""
    err = e.errors()[0]
    loc = tuple(str(p) for p in err["loc"])
    short = next((name for name, fields in SHORT.items() if loc[:2] in fields), None)
    names = [f"XLADDIN_{short.upper()}"] if short else []
    names.append("XLADDIN_" + "__".join(loc[:2]).upper())
    return f"setting {short or '.'.join(loc)}: {err['msg']} ({' or '.join(names)})"


@functools.cache
def known_variables() -> frozenset[str]:
    """Every ``XLADDIN_*`` name that sets something (the settings' shape: worked out once)."""
    names = {n for n in Settings.model_fields} | set(SHORT)
    for section in ("sampling", *ENGINE_SECTIONS):
        names |= {f"{section}__{f}" for f in Settings.model_fields[section].annotation.model_fields}  # type: ignore[union-attr]
    return frozenset({"XLADDIN_" + n.upper() for n in names} | OTHER_VARIABLES)


def _warn_unknown(env: Mapping[str, str]) -> None:
    """A warning for each ``XLADDIN_*`` variable that is no setting, naming the closest one."""
    known = known_variables()
    for name in sorted(n for n in env if n.upper().startswith("XLADDIN_") and n.upper() not in known):
        close = difflib.get_close_matches(name.upper(), known, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        log.warning("%s is not a setting and is ignored%s", name, hint)


def loopback(host: str) -> bool:
    """Whether a bind address stays on this machine (``localhost``, 127.0.0.1, ::1): beyond it a server
    needs an API key."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
