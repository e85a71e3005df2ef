"""A report's text as a value: the text itself (a ``str``: its pages joined by ``tables.PAGE_BREAK``) and
what code reads of it, each reading made once and kept with the text, never in a store looked up by the
whole text.

A report reader process reads a file's key-figure tables and prose figures beside its text, and the
``Document`` it sends back carries them (``Document(text, readings)``), so the process that asks the
engine does not read them again; a text typed in a cell or a CSV field becomes a ``Document`` when its
row is parsed (``StockSample``, ``HighlightsInput``), and its readings are made when first asked for. A
function of one text that code reads with is marked ``@read_once``: given a ``Document`` it reads it
once for that document; given a plain ``str`` it reads it each time (a quote, a part of a text).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

T = TypeVar("T")


class Document(str):
    """A text and the readings made of it (by name: ``read_key_tables``, ``_read_prose`` …): whoever reads
    it asks for one kept (``kept``) and keeps what it made (``keep``); the text never calls its reader."""

    def __new__(cls, text: str = "", readings: dict[str, Any] | None = None) -> Document:
        doc = super().__new__(cls, text)
        doc._readings = dict(readings) if readings else {}
        return doc

    def __reduce__(self) -> tuple[Any, ...]:  # pickled with its readings (a row sent to another process)
        return Document, (str(self), self._readings)

    @property
    def readings(self) -> dict[str, Any]:
        """Every reading made of this text so far, by name (what a reader process sends with it)."""
        return dict(self._readings)

    def kept(self, name: str, default: Any = None) -> Any:
        """The reading ``name`` made of this text, or ``default`` when none is made yet."""
        return self._readings.get(name, default)

    def keep(self, name: str, value: T) -> T:
        """``value`` kept as the reading ``name`` of this text (two threads making it at once keep the same
        value); returned."""
        self._readings[name] = value
        return value


_NOT_READ = object()


def document(text: str) -> Document:
    """``text`` as a ``Document`` (itself when it is one)."""
    return text if isinstance(text, Document) else Document(text)


def stripped(text: str) -> str:
    """``text`` without the whitespace around it: itself (its readings kept) when it has none."""
    if not text or not (text[0].isspace() or text[-1].isspace()):  # a report's whole text is not copied to learn it
        return text
    return text.strip()


def read_once(fn: Callable[[str], T]) -> Callable[[str], T]:
    """``fn(text)`` read once per ``Document`` (kept under ``fn``'s name); each time for a plain ``str``."""
    name = fn.__name__

    @functools.wraps(fn)
    def reading(text: str) -> T:
        if not isinstance(text, Document):
            return fn(text)
        value = text.kept(name, _NOT_READ)
        return text.keep(name, fn(text)) if value is _NOT_READ else value

    return reading


def _as_document(value: Any) -> Document:
    if not isinstance(value, str):
        raise ValueError("a text is expected")
    return document(value)


# a model's text field that keeps a ``Document`` as it is (with its readings) and makes one of a ``str``;
# in JSON, the text
DocumentText = Annotated[Document, PlainValidator(_as_document), PlainSerializer(str, return_type=str),
                         WithJsonSchema({"type": "string"})]
