"""Calc's side of the cells' runtime, free of UNO so it runs anywhere: every call's result is a
``Waiting`` (in LibreOffice a volatile result, ``XVolatileResult``) holding its value now — final, or
the placeholder while its answers are awaited. When its tickets settle, ``post`` runs ``settle`` on
LibreOffice's main thread, which gives the cells listening to it their final value, and LibreOffice
recalculates them (now from memory or the cache).

One ``Waiting`` per distinct call (function and arguments): a sheet recalculated while answers are
on their way gets the same one back, so each call is watched once and no cell loops. (A volatile
result is also the one way a Python add-in hands Calc an array: a typed value in its event.)"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from ..batcher import Batcher
from ..engine import engine_kind
from ..engine.openai_http import OpenAIHTTPEngine
from ..excel import cells, functions
from ..excel.pending import CellRuntime
from ..settings import HTTPOptions, Settings

Body = Callable[[CellRuntime, tuple[Any, ...], Any], Any]


class PrivateServer(OpenAIHTTPEngine):
    """The embedded engine in a process of its own (``xladdin.server.cpu_server`` on 127.0.0.1, started
    with the first request, stopped with the runtime): llama.cpp cannot be loaded into LibreOffice's
    process, whose C++ runtime clashes with it."""

    def __init__(self, settings: Settings, python: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        e = settings.embedded
        super().__init__(HTTPOptions(url=f"http://127.0.0.1:{self.port}/v1", timeout=e.timeout,
                                     max_parallel=e.max_parallel, structured_output=e.structured_output, retries=0))
        self._settings, self._python = settings, python
        self._server: Any = None

    def _spawn(self) -> None:
        from ..server.launcher import ServerProcess

        e = self._settings.embedded
        cmd = [self._python, "-m", "xladdin.server.cpu_server", "--host", "127.0.0.1", "--port", str(self.port),
               "--parallel", str(e.max_parallel or 4), "--n-ctx", str(e.n_ctx), "--exit-with", str(os.getpid())]
        cmd += ["--model", e.model] if e.model else []
        env = {**os.environ, "XLADDIN_N_THREADS": str(e.n_threads)}
        self._server = ServerProcess(cmd, f"http://127.0.0.1:{self.port}", env=env)
        self._server.wait_ready(600)

    async def start(self) -> None:
        if self._server is None:
            await asyncio.to_thread(self._spawn)
        await super().start()

    async def aclose(self) -> None:
        await super().aclose()
        if self._server is not None:
            await asyncio.to_thread(self._server.stop, 10)


def core(python: str | None = None) -> Batcher:
    """The batcher a Calc runtime uses: the configured server, or the embedded engine in a private
    server run by ``python`` (the environment's own)."""
    settings = Settings.load()
    if engine_kind(settings) != "embedded":
        return Batcher.from_settings(settings)
    return Batcher.from_settings(settings, PrivateServer(settings, python or sys.executable), own_engine=True)


def _flag(value: Any) -> bool:
    return bool(value) and str(value).strip().upper() not in ("0", "FALSE", "0.0")


# function → (body, width of its result: 1 for one value)
BODIES: dict[str, tuple[Body, int]] = {
    "QWEN_SCREEN": (lambda rt, a, caller: functions.screen(rt, a[0], _flag(a[1]), a[2], caller),
                    len(cells.SPILL_FIELDS)),
    "QWEN": (lambda rt, a, caller: functions.ask(rt, a[0], a[1], caller), 1),
    "QWEN_EXTRACT": (lambda rt, a, caller: functions.extract(rt, a[0], a[1], a[2], caller), 1),
    "QWEN_CLASSIFY": (lambda rt, a, caller: functions.classify(rt, a[0], a[1], caller), 1),
    "QWEN_HIGHLIGHTS": (lambda rt, a, caller: functions.highlights(rt, a[0], a[1], a[2], caller), 1),
    "QWEN_STATUS": (lambda rt, a, caller: functions.status(rt), functions.STATUS_WIDTH),
}


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


def _placeholder(value: Any) -> bool:
    if isinstance(value, list):
        return any(cells.PENDING in row for row in value if isinstance(row, list))
    return value == cells.PENDING


class Waiting:
    """A call whose answers are awaited; the cells listening to it are told its value."""

    def __init__(self, compute: Callable[[Waiting], Any], event: Callable[[Any, Any], Any]):
        self.compute, self._event = compute, event
        self.value: Any = None
        self.final = False  # settled: Calc's recalculation of its cells is answered without computing
        self.listeners: list[Any] = []

    def addResultListener(self, listener: Any) -> None:  # noqa: N802  (the UNO method's name)
        self.listeners.append(listener)
        listener.modified(self._event(self, self.value))  # the current value, at once

    def removeResultListener(self, listener: Any) -> None:  # noqa: N802
        if listener in self.listeners:
            self.listeners.remove(listener)

    def settle(self) -> None:
        """On the main thread: the final value to every listening cell."""
        self.value = self.compute(self)
        self.final = not _placeholder(self.value)
        for listener in list(self.listeners):
            listener.modified(self._event(self, self.value))


class CalcFunctions:
    """The functions as Calc calls them: one process-wide ``CellRuntime``, one ``Waiting`` per call."""

    def __init__(self, make_waiting: Callable[[Callable[[Waiting], Any]], Waiting],
                 post: Callable[[Callable[[], None]], None], *, python: str | None = None,
                 runtime: CellRuntime | None = None):
        self._make_waiting, self._post, self._python = make_waiting, post, python
        self._runtime = runtime
        self._lock = threading.Lock()
        self.calls: dict[tuple[str, Any], Waiting] = {}
        self._settled: list[Waiting] = []  # settled on the engine's thread, to settle on the main thread
        self._posted = False

    def runtime(self) -> CellRuntime:
        with self._lock:
            if self._runtime is None:
                self._runtime = CellRuntime(batcher=core(self._python), rewrite=self._recalculate)
            return self._runtime

    def _recalculate(self, token: Waiting) -> None:
        """A waiting call's tickets have settled (on the engine's thread): settle it on the main thread,
        with every other call that settles before the main thread gets to it (one event for them all)."""
        with self._lock:
            self._settled.append(token)
            if self._posted:
                return
            self._posted = True
        self._post(self._settle_all)

    def _settle_all(self) -> None:
        with self._lock:
            tokens, self._settled, self._posted = self._settled, [], False
        for token in tokens:
            token.settle()

    def call(self, name: str, args: tuple[Any, ...]) -> Waiting:
        """The result of ``name(args)``: always a ``Waiting`` (a volatile result in Calc), the same one
        for the same call, holding its value now — final, or the placeholder until its answers arrive."""
        key = (name, repr(args))
        token = self.calls.get(key)
        if token is None:
            body, width = BODIES[name]
            shaped = functions.cell_errors(self.runtime, width)(body)
            given = tuple(from_calc(a) for a in args)
            token = self.calls[key] = self._make_waiting(lambda tok: to_calc(shaped(self.runtime(), given, tok)))
        if token.final:  # settled with no placeholder left: the same call gives the same value
            return token
        value = token.compute(token)
        if value != token.value:
            if token.listeners:  # cells listen to the old value: a new result for the new one
                token = self.calls[key] = self._make_waiting(token.compute)
            token.value = value
        return token

    def close(self) -> None:
        with self._lock:
            rt, self._runtime = self._runtime, None
        if rt is not None:
            rt.close(abort=True)
