"""Calc's side of the cells' runtime, free of UNO so it runs anywhere: every call's result is a
``Waiting`` (in LibreOffice a volatile result, ``XVolatileResult``) holding its value now — final, or
the placeholder while its answers are awaited. When its fates settle, ``post`` runs ``settle`` on
LibreOffice's main thread, which gives the cells listening to it their final value, and LibreOffice
recalculates them (now from memory or the cache).

One ``Waiting`` per distinct call (function and arguments): a sheet recalculated while answers are
on their way gets the same one back, so each call is watched once and no cell loops. (A volatile
result is also the one way a Python add-in hands Calc an array: a typed value in its event.)"""

from __future__ import annotations

import concurrent.futures
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..core import Batcher, Reader
from ..engine import engine_kind
from ..engine.private_server import PrivateServer
from ..errors import is_error_text
from ..settings import Settings
from ..sheet import functions
from ..sheet.functions import CellRuntime

log = logging.getLogger(__name__)
MAX_CALLS = 100_000  # distinct calls remembered (a call's value and the cells listening to it)
LIVE = frozenset({"QWEN_STATUS"})  # results told their new value whenever calls settle or are made


def core(python: str | None = None) -> Batcher:
    """The batcher a Calc runtime uses: the configured server, or the embedded engine in a private
    server run by ``python`` (the environment's own)."""
    settings = Settings.load()
    python = python or sys.executable
    if engine_kind(settings) != "embedded":
        batcher = Batcher.from_settings(settings)
    else:
        engine = PrivateServer(settings.embedded, python, settings.cache_dir)
        batcher = Batcher.from_settings(settings, engine, own_engine=True)
    # the environment's Python for the reader processes; the store read on the batcher's disk thread
    batcher.reader = Reader(batcher.cache, processes=settings.readers, python=python, disk=batcher.disk,
                            memory_mib=settings.reader_memory_mib)
    return batcher


def from_calc(value: Any) -> Any:
    """A Calc argument as xlwings gives it: arrays as lists of rows, blanks (and a left-out
    argument) as ``None``."""
    if isinstance(value, tuple):
        return [from_calc(v) for v in value]
    return None if value == "" else value


def to_calc(value: Any) -> Any:
    """A cell value Calc shows: numbers as floats, ``None`` as an empty text."""
    if isinstance(value, list):
        return [[to_calc(v) for v in row] for row in value]
    if value is None:
        return ""
    if isinstance(value, bool | int):
        return float(value)
    return value


def _final(value: Any, pending: bool) -> bool:
    """A value that no later call can change: not waiting on its requests (``pending``, the runtime's word:
    ``CellRuntime.waited``) and no error (an error is shown for a while, then its request is made again, as
    in Excel)."""
    values = [v for row in value for v in row] if isinstance(value, list) else [value]
    return not pending and not any(is_error_text(v) for v in values)


class Waiting:
    """A call's result as Calc holds it; the cells listening to it are told its value."""

    def __init__(self, event: Callable[[Any, Any], Any]):
        self._event = event
        self.value: Any = None
        self.final = False  # settled for good: Calc's recalculation of its cells is answered without computing
        self.live = False  # never final: told its new value whenever calls settle (QWEN_STATUS)
        self.listeners: list[Any] = []

    def addResultListener(self, listener: Any) -> None:  # noqa: N802  (the UNO method's name)
        self.listeners.append(listener)
        listener.modified(self._event(self, self.value))  # the current value, at once

    def removeResultListener(self, listener: Any) -> None:  # noqa: N802
        if listener in self.listeners:
            self.listeners.remove(listener)

    def settle(self, value: Any, pending: bool = False) -> None:
        """On the main thread: the value to every listening cell (``pending``: it still waits)."""
        self.value, self.final = value, _final(value, pending) and not self.live
        for listener in list(self.listeners):
            listener.modified(self._event(self, value))


class _Call:
    """One distinct call (function and arguments): what computes its value, what makes it of its answers
    once they are in (``functions.Answered.made``), and its result now. The call is the caller its
    requests are watched under, so a result replaced meanwhile is still the one settled."""

    __slots__ = ("compute", "finish", "result")

    def __init__(self, compute: Callable[[_Call], tuple[Any, bool]], finish: Callable[[Callable[[], Any]], Any],
                 result: Waiting):
        self.compute, self.finish, self.result = compute, finish, result


class CalcFunctions:
    """The functions as Calc calls them: one process-wide ``CellRuntime``, one ``Waiting`` per call."""

    def __init__(self, make_waiting: Callable[[], Waiting], post: Callable[[Callable[[], None]], None], *,
                 python: str | None = None, batcher: Batcher | None = None):
        self._make_waiting, self._post, self._python, self._batcher = make_waiting, post, python, batcher
        self._runtime: CellRuntime | None = None
        self._lock = threading.Lock()
        self.calls: dict[tuple[str, str], _Call] = {}
        # settled on the engine's thread, to settle on the main thread: each call, and its value made of its
        # answers (``None``: computed again)
        self._settled: list[tuple[_Call, Callable[[], Any] | None]] = []
        self._posted = False
        self._refresh_posted = False  # a refresh of the live calls waits for the main thread

    def runtime(self) -> CellRuntime:
        with self._lock:
            if self._runtime is None:
                self._runtime = CellRuntime(batcher=self._batcher or core(self._python), told=self._recalculate)
            return self._runtime

    def _recalculate(self, settled: concurrent.futures.Future) -> None:
        """The runtime's ``told``: a call's fates have settled (on the engine's thread): settle it on the main
        thread with its value made of its answers (``Answered.made``; ``None``: computed again), with every
        other call that settles before the main thread gets to it (one event for them all)."""
        answered = settled.result()
        call, value = answered.caller, answered.made
        with self._lock:
            self._settled.append((call, value))
            if self._posted:
                return
            self._posted = True
        self._post(self._settle_all)

    def _settle_all(self) -> None:
        with self._lock:
            calls, self._settled, self._posted = self._settled, [], False
        for call, value in calls:
            call.result.settle(*(call.compute(call) if value is None else (call.finish(value), False)))
        self._refresh()

    def _refresh(self) -> None:
        """On the main thread: every live call (``QWEN_STATUS``) computed again and, where its value
        changed, told to its cells — Calc recalculates only the cells a change reaches, and a call
        without arguments is reached by none."""
        with self._lock:
            self._refresh_posted = False
        for call in [c for c in self.calls.values() if c.result.live]:
            value, pending = call.compute(call)
            if value != call.result.value:
                call.result.settle(value, pending)

    def _post_refresh(self) -> None:
        with self._lock:
            if self._refresh_posted or not any(c.result.live for c in self.calls.values()):
                return
            self._refresh_posted = True
        self._post(self._refresh)

    def call(self, name: str, args: tuple[Any, ...]) -> Waiting:
        """The result of ``name(args)``: always a ``Waiting`` (a volatile result in Calc), the same one
        for the same call, holding its value now — final, or the placeholder until its answers arrive."""
        key = (name, repr(args))
        call = self.calls.get(key)
        if call is None:
            given = tuple(from_calc(a) for a in args)
            call = self.calls[key] = _Call(lambda c: self._compute(name, given, c),
                                           lambda value: to_calc(functions.settled(self.runtime(), name, value)),
                                           self._waiting(name))
            if len(self.calls) > MAX_CALLS:  # forget the oldest settled calls (their cells keep their values)
                for old in [k for k, c in self.calls.items() if c.result.final][: len(self.calls) // 4]:
                    del self.calls[old]
        if call.result.final:  # settled with neither placeholder nor error: the same call gives the same value
            return call.result
        value, _ = call.compute(call)
        if value != call.result.value:
            if call.result.listeners:  # cells listen to the old value: a new result for the new one
                call.result = self._waiting(name)
            call.result.value = value
        if not call.result.live:  # a call computed (a request made, a cell waiting): the status moves
            self._post_refresh()
        return call.result

    def _compute(self, name: str, given: tuple[Any, ...], call: _Call) -> tuple[Any, bool]:
        """The call's value now, and whether it waits on its requests (their futures, not its text)."""
        rt = self.runtime()
        value = to_calc(functions.call(rt, name, given, call))
        return value, rt.waited()

    def _waiting(self, name: str) -> Waiting:
        result = self._make_waiting()
        result.live = name in LIVE
        return result

    def close(self) -> None:
        with self._lock:
            rt, self._runtime = self._runtime, None
        if rt is not None:
            rt.close(abort=True)
