"""Values between the processes of a Ray job: a row's record, its read report and its result, pickled
so that an ``XladdinError`` crosses as it was, and numpy object columns to carry them in a batch."""

from __future__ import annotations

import io
import pickle
from typing import Any

from ..errors import XladdinError


class _Pickler(pickle.Pickler):
    """Pickles a row's value; an ``XladdinError`` travels as its class, arguments and attributes (an
    ``InputError``'s own ``__init__`` takes two arguments, which plain pickling of exceptions loses)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, XladdinError):
            return _error, (type(obj), obj.args, dict(obj.__dict__))
        return NotImplemented


def _error(cls: type[XladdinError], args: tuple[Any, ...], attrs: dict[str, Any]) -> XladdinError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(attrs)
    return error


def dumps(value: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


loads = pickle.loads


def column(values: list[Any]) -> Any:
    import numpy as np

    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
