"""The tests' kit: what many test files need, written once (issue 29). Imported as ``from kit import …``
(pytest puts ``tests/`` on the path, as for ``conftest``); the fixtures stay in ``conftest.py``.

- ``Caller``: what xlwings passes a UDF as ``caller``.
- ``wait_until``: wait for a condition within a bound, failing the test with a message if it never holds.
- ``cli_command`` / ``run_cli`` / ``run_main``: ``xladdin …`` in a fresh process (to start or to run to
  its end) or in this one.
- ``free_port``: a port on 127.0.0.1 that nothing listens on.
- ``record_disk``: every read and write of the answer cache, with the thread it ran on.
- ``recalculates``: a cells runtime's ``told`` as Excel's is.
- ``Walk``: every xladdin module a call passes, on every thread, and every call up into a layer above."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CLI_MODULE = "xladdin.cli.main"


class Caller:
    """What xlwings passes a UDF as ``caller``: the cell's ``address``, its sheet (``sheet.name``) and that
    sheet's book (``sheet.book``: ``name``, ``fullname``, ``sheets``). The runtime knows a cell by (book
    name, sheet name, address).

    ``book``: the path the workbook is saved at (its name and fullname from it; a relative report path is
    taken from its folder), or None: an unsaved workbook ``t.xlsx``, whose fullname is its bare name as
    Excel gives it before the first save (no folder). The book holds no sheets xlwings could read (no Rules
    sheet: the default rules)."""

    def __init__(self, address: str = "$H$2", book: str | Path | None = None, sheet: str = "Pool"):
        full = str(book) if book is not None else "t.xlsx"
        self.address = address
        self.sheet = types.SimpleNamespace(
            name=sheet, book=types.SimpleNamespace(name=Path(full).name, fullname=full, sheets=[]))

    def __repr__(self) -> str:
        return f"Caller({self.address!r}, {self.sheet.book.fullname!r}, {self.sheet.name!r})"


def wait_until(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05, *,
               message: str | Callable[[], Any] | None = None) -> Any:
    """Calls ``predicate`` every ``interval`` seconds until it returns something true, and returns that.
    ``timeout`` bounds a condition, never a duration: the wait ends as soon as it holds. Once ``timeout``
    seconds have passed with it false (checked at least once, even for a bound already spent), the test
    fails: ``message`` (a text, or a function giving it, called then), the bound and the last value.

    For a wait that should also end when a process has (so that the test's own assertion then says so),
    put that in the predicate: ``lambda: proc.poll() is not None or done()``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = message() if callable(message) else message
            raise AssertionError(f"{said or 'the condition never held'} (not within {timeout:g} s; "
                                 f"last: {value!r})")
        time.sleep(interval)


def cli_command(*args: Any) -> list[str]:
    """``xladdin ARGS`` as a command line for this interpreter (``python -m xladdin.cli.main``)."""
    return [sys.executable, "-m", CLI_MODULE, *map(str, args)]


def run_cli(*args: Any, env: dict[str, str] | None = None, timeout: float | None = 300,
            cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """``xladdin ARGS`` in a fresh process run to its end: ``returncode``, and ``stdout`` and ``stderr``
    as text. ``env``: its whole environment (default this process's, which ``isolated_state`` has given
    the test's own cache and config dirs and no XLADDIN_* of the caller's)."""
    return subprocess.run(cli_command(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def run_main(capsys, *args: Any) -> subprocess.CompletedProcess:
    """``xladdin ARGS`` in this process (``xladdin.cli.main.main``), so that the test's monkeypatches hold:
    its exit code and what it wrote, read through pytest's ``capsys`` (which this empties), in ``run_cli``'s
    shape."""
    from xladdin.cli.main import main

    argv = [str(a) for a in args]
    code = main(argv)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound and let go: free until something takes it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_for(kind: str, tmp_path: Path) -> Any:
    """A disk cache that is ``off`` (disabled) or ``unwritable`` (its folder cannot be made: it degrades to
    no cache with a warning)."""
    from xladdin.core.cache import Cache

    if kind == "off":
        return Cache(tmp_path / "cache", enabled=False)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    cache = Cache(blocker / "cache")
    assert cache.warning and not cache.enabled
    return cache


def on_engine(engine: Any, call: Callable[[Any], Any]) -> Any:
    """``await call(engine)`` on an event loop of its own, the engine closed after (its HTTP session belongs
    to that loop)."""
    import asyncio

    async def run() -> Any:
        try:
            return await call(engine)
        finally:
            await engine.aclose()

    return asyncio.run(run())


DISK_THREAD = "xladdin-disk"  # the batcher's disk thread's name starts so (``threads.SerialThread``)


def record_disk(monkeypatch) -> list[tuple[str, str, str]]:
    """Every read and write of the answers of every ``Cache`` (``Cache.get``, ``Cache.set``) from now on, as
    (``"get"`` or ``"set"``, key, the name of the thread it ran on), in order."""
    from xladdin.core.cache import Cache

    done: list[tuple[str, str, str]] = []
    get, put = Cache.get, Cache.set

    def reading(self, key):
        done.append(("get", key, threading.current_thread().name))
        return get(self, key)

    def writing(self, key, value):
        done.append(("set", key, threading.current_thread().name))
        return put(self, key, value)

    monkeypatch.setattr(Cache, "get", reading)
    monkeypatch.setattr(Cache, "set", writing)
    return done


def overloaded_while(fail: threading.Event) -> Callable[[Any], Any]:
    """An engine's answer function: while ``fail`` is set the server is overloaded (a 503 ``EngineError``),
    then a screen answer."""
    from xladdin.errors import EngineError
    from xladdin.testing import screen_answer

    def answer(_: Any) -> Any:
        if fail.is_set():
            raise EngineError("engine error 503 (http://gpu): overloaded")
        return screen_answer("经营稳健")

    return answer


def recalculates(into: Callable[[Any], Any]) -> Callable[[Any], None]:
    """A cells runtime's ``told`` as Excel's is: ``into(caller)`` for each waiting cell whose answers are in
    (the call's future gives its ``Answered``)."""
    return lambda settled: into(settled.result().caller)


AWAITED = ("xladdin-disk", "xladdin-rows")  # the batcher's threads whose work its loop awaits (``Walk.carriers``)


class Walk:
    """What one call passes, recorded by a profile hook on every thread started while it is on (start the
    runtime's threads inside ``walking``): ``entered``, the xladdin modules it entered while ``recording``;
    ``upward``, every function called directly by a function of a layer below its own (``test_layers``) as
    (caller's module, its function, callee's module, its function). A callback run by a future is called
    by the future, not by whoever set it. ``aliases``: a module's name as imported under another (the
    UDFs as Windows imports them), ``ignored``: modules of the test's own stand-ins."""

    def __init__(self, aliases: dict[str, str] | None = None, ignored: tuple[str, ...] = ("xladdin.testing",)):
        self.aliases, self.ignored = aliases or {}, ignored
        self.entered: set[str] = set()
        self.functions: dict[str, set[str]] = {}  # module -> the names of its functions entered
        self.upward: set[tuple[str, str, str, str]] = set()
        self.threads: dict[int, str] = {}  # every thread that ran xladdin code, in the order first seen
        self.futures = 0  # ``concurrent.futures.Future``s made (any thread) while recording
        self.recording = threading.Event()
        from test_layers import layer_of

        self._layer = lambda module: layer_of(module.removeprefix("xladdin."))

    def said(self) -> str:
        """Each module entered with the functions of it entered, for an assertion's message."""
        return "; ".join(f"{m}: {' '.join(sorted(self.functions[m]))}" for m in sorted(self.entered))

    def _module(self, frame: Any) -> str:
        name = frame.f_globals.get("__name__", "")
        return self.aliases.get(name, name)

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or not self.recording.is_set():
            return
        callee = self._module(frame)
        if not callee.startswith("xladdin.") or callee in self.ignored:
            return
        self.entered.add(callee)
        self.functions.setdefault(callee, set()).add(frame.f_code.co_name)
        ident = threading.get_ident()
        if ident not in self.threads:
            self.threads[ident] = threading.current_thread().name
        up = frame.f_back
        caller = self._module(up) if up is not None else ""
        if caller.startswith("xladdin.") and caller != callee and caller not in self.ignored:
            if self._layer(callee) > self._layer(caller):
                self.upward.add((caller, up.f_code.co_name, callee, frame.f_code.co_name))

    def carriers(self, awaited: tuple[str, ...] = AWAITED) -> list[str]:
        """The threads that carried the call, in order: each thread that ran xladdin code but those whose work
        the loop awaits and takes back (``awaited``: the disk and rows threads): a request handed to one of
        those comes back to the loop, it is not handed on."""
        return [name for name in self.threads.values() if not name.startswith(awaited)]

    @contextmanager
    def walking(self) -> Iterator[Walk]:
        import concurrent.futures

        made = concurrent.futures.Future.__init__

        def counted(future: Any, *args: Any, **kwargs: Any) -> None:
            if self.recording.is_set():
                self.futures += 1
            made(future, *args, **kwargs)

        concurrent.futures.Future.__init__ = counted  # type: ignore[method-assign]
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)
        try:
            yield self
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            concurrent.futures.Future.__init__ = made  # type: ignore[method-assign]
