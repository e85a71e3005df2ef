"""Exceptions raised by xladdin. Every one is an ``XladdinError``.

    XladdinError
    ├── ConfigError              a setting is missing or wrong
    │   └── ModelUnavailable     no model file, and it cannot be fetched
    ├── InputError               one input field is bad (names the field)
    ├── EngineError              the engine failed to answer
    │   ├── EngineOffline        cannot reach the engine (names the URL)
    │   ├── EngineTimeout        the engine did not answer in time
    │   └── EngineRejected       the engine refused this one request (too long, bad request)
    └── OutputError              the model's answer is not valid for the schema

Cells and report rows show ``str(error)`` behind ``#QWEN!``; the messages are
written to be shown to a user as they are.
"""

from __future__ import annotations

from pydantic import ValidationError


class XladdinError(Exception):
    """Base of every error xladdin raises."""


class ConfigError(XladdinError):
    pass


class ModelUnavailable(ConfigError):
    pass


class InputError(XladdinError):
    """A bad input value. ``field`` names the input field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field} {message}")


class EngineError(XladdinError):
    pass


class EngineOffline(EngineError):
    pass


class EngineTimeout(EngineError):
    pass


class EngineRejected(EngineError):
    pass


class OutputError(XladdinError):
    pass


def internal_error(e: BaseException) -> XladdinError:
    """A bug met while answering one row, as that row's error (the other rows go on)."""
    return XladdinError(f"internal error: {e.__class__.__name__}: {e}")


def first_error(e: Exception, default: str = "") -> str:
    """A validation error in one line: where (the field's dotted path, else ``default``) and why,
    without pydantic's link line."""
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or default
        return f"{where}: {err['msg']}" if where else err["msg"]
    return str(e)
