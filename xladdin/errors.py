"""Exceptions raised by xladdin. Every one is an ``XladdinError``.

    XladdinError
    ├── ConfigError              a setting is missing or wrong
    │   └── ModelUnavailable     no model file, and it cannot be fetched
    ├── InputError               one input field is bad (.field names it)
    ├── EngineError              the engine failed to answer (.url: the server, when one; the
    │   │                        transport's error as __cause__)
    │   ├── EngineOffline        cannot reach the engine (names the URL)
    │   ├── EngineTimeout        the engine did not answer in time
    │   │   └── EngineStalled    no answer and no sign of work for a whole table's bound
    │   └── EngineRejected       the engine refused this one request (too long, bad request)
    ├── OutputError              the model's answer is not valid for the schema (.answer: its text)
    │   └── RetryError           still not valid after asking again (.answer: the last one,
    │                            .attempts: every answer with what was wrong with it)
    └── InternalError            a bug met while answering one row (that row's error; the rest go on)

Cells and report rows show ``str(error)`` behind ``#QWEN!``; the messages are
written to be shown to a user as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

ERROR_PREFIX = "#QWEN!"  # what a cell or a report row shows before an error's message


def error_text(err: BaseException) -> str:
    """An error as a cell or a report row shows it."""
    return f"{ERROR_PREFIX} {err}"


def is_error_text(value: object) -> bool:
    return isinstance(value, str) and value.startswith(ERROR_PREFIX)


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
        self.message = message  # without the field's name
        super().__init__(f"{field} {message}")


class EngineError(XladdinError):
    """The engine failed to answer; ``url`` is the server's, when one is known."""

    def __init__(self, message: str, *, url: str | None = None):
        self.url = url
        super().__init__(message)


class EngineOffline(EngineError):
    pass


class EngineTimeout(EngineError):
    pass


class EngineStalled(EngineTimeout):
    """No answer, and no sign of the engine working, for a whole table's (or a cell's) bound."""


class EngineRejected(EngineError):
    pass


class OutputError(XladdinError):
    """The model's answer is not valid; ``answer`` is its text, when there was one."""

    def __init__(self, message: str, *, answer: str | None = None):
        self.answer = answer
        super().__init__(message)


@dataclass(frozen=True)
class Attempt:
    """One answer the model gave and why it was not valid."""

    answer: str
    error: str


class RetryError(OutputError):
    """The answer was still not valid after asking again with what was wrong: keeps the last answer
    and every attempt (what to show, and what to look at)."""

    def __init__(self, message: str, *, attempts: tuple[Attempt, ...] = ()):
        self.attempts = attempts
        super().__init__(message, answer=attempts[-1].answer if attempts else None)


class InternalError(XladdinError):
    """A bug met while answering one row: that row's error, the other rows go on."""


def internal_error(e: BaseException) -> InternalError:
    """A bug met while answering one row, as that row's error (the cause kept)."""
    error = InternalError(f"internal error: {e.__class__.__name__}: {e}")
    error.__cause__ = e
    return error


def row_error(e: BaseException) -> XladdinError:
    """What failed one row, as its error: an ``XladdinError`` as it is, anything else a bug (``internal_error``)."""
    return e if isinstance(e, XladdinError) else internal_error(e)


def first_error(e: Exception, default: str = "") -> str:
    """A validation error in one line: where (the field's dotted path, else ``default``) and why,
    without pydantic's link line."""
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or default
        return f"{where}: {err['msg']}" if where else err["msg"]
    return str(e)
