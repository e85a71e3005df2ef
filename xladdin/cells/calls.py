"""One call of a worksheet function as the add-ins send it (its name and its arguments in the table's
order, as JSON) turned into the arguments xlwings would give the Excel UDF, and run through the
functions' bodies (``sheet/functions.py``) on the process-wide ``CellRuntime``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from ..errors import XladdinError, is_error_text
from ..sheet import functions
from ..sheet.functions import BY_NAME, CellRuntime, Function, Param

MAX_CALL_BYTES = 1 << 20  # one call's arguments as JSON (a whole annual report's text fits)


WAITING = object()  # ``evaluate``'s answer for a call still waiting (its placeholder rows are the runtime's)


class CallError(XladdinError):
    """A call the service cannot make: an unknown function, or arguments not of its form."""


def call_id(name: str, args: list[Any]) -> str:
    """The same function with the same arguments is one call, from any client."""
    text = json.dumps([name, args], ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _number(v: Any) -> Any:
    """A grid's number as xlwings gives it (a float); an empty cell (``""`` from Office) as ``None``."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return float(v)
    return v


def _range(v: Any) -> list[list[Any]] | None:
    if v is None:
        return None
    rows = v if isinstance(v, list) else [[v]]
    rows = [r if isinstance(r, list) else [r] for r in rows]
    return [[None if c == "" else _number(c) for c in r] for r in rows]


def _argument(p: Param, v: Any) -> Any:
    if isinstance(v, dict):
        raise CallError(f"{p.name}: a value or a range, not an object")
    if p.shape == "range":
        return _range(v)
    if p.shape == "list":  # xlwings' ndim=1: a range flattened, one value as a list of one
        rows = _range(v)
        return None if rows is None else [c for r in rows for c in r]
    if isinstance(v, list):  # Office gives a one-cell range passed to a value argument as its value
        flat = [c for r in v for c in (r if isinstance(r, list) else [r])]
        if len(flat) != 1:
            raise CallError(f"{p.name}: one value, not a range of {len(flat)} cells")
        v = flat[0]
    return _number(v)


def arguments(fn: Function, args: Any) -> list[Any]:
    """The call's arguments as the UDF gets them; a bad one is an ``InputError`` naming it."""
    if not isinstance(args, list):
        raise CallError(f"{fn.name}: args must be a list")
    if len(args) > len(fn.params):
        raise CallError(f"{fn.name} takes at most {len(fn.params)} arguments, not {len(args)}")
    args = list(args) + [None] * (len(fn.params) - len(args))
    out = []
    for p, v in zip(fn.params, args, strict=True):
        if v is None and p.default is not None:
            v = p.default
        if v is None and not p.optional:
            raise CallError(f"{fn.name}: {p.name} is missing")
        out.append(_argument(p, v))
    return out


def function(name: Any) -> Function:
    if not isinstance(name, str) or name.upper() not in BY_NAME:
        raise CallError(f"no function {name!r}: one of {', '.join(BY_NAME)}")
    return BY_NAME[name.upper()]


def evaluate(rt: CellRuntime, fn: Function, args: list[Any], caller: str) -> Any:
    """The function's cell value (a value, or rows for a spill), as the Excel UDF gives it, or ``WAITING``
    while it waits on the engine; ``caller``: what the call waits under (its ``call_id``), and what the
    runtime's recalculation names."""
    try:
        given = arguments(fn, args)
    except CallError as e:
        return _plain(functions.failed(rt, fn.name, e))
    value = functions.call(rt, fn.name, given, caller)
    return WAITING if rt.waited() else _plain(value)


def finished(rt: CellRuntime, fn: Function, value: Callable[[], Any]) -> Any:
    """A waiting call's cell value, made from its answers (``functions.Answered.made``), as ``evaluate``
    gives it."""
    return _plain(functions.settled(rt, fn.name, value))


def _plain(value: Any) -> Any:
    """A cell value as JSON can carry it (numbers, text, booleans, ``None`` for an empty cell)."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if hasattr(value, "item"):  # a numpy scalar
        return _plain(value.item())
    return str(value)


def is_error(value: Any) -> bool:
    first = value
    while isinstance(first, list) and first:
        first = first[0]
    return is_error_text(first)
