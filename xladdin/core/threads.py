"""The threads the core runs its work on, each one thing at a time in order: the disk thread (every read
and write of the answers and the report texts' store: a slow or locked disk holds up only it), the rows
thread (a result made from an answer), and the loop thread (``LoopThread``: one asyncio loop, where each
request's coroutine runs). A future is settled with ``settle``/``fail``, which never raise when another
thread settled it first."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, InvalidStateError
from typing import Any

from ..errors import row_error

log = logging.getLogger(__name__)


def fail(future: Future, error: BaseException) -> None:
    """``future`` settled with what failed its row (``errors.row_error``), unless it was settled first."""
    settle(future, row_error(error), error=True)


def settle(future: Future, value: Any, *, error: bool = False) -> None:
    """``future`` settled with ``value`` (an exception when ``error``), unless it was settled or
    cancelled first (the threads that may end it race)."""
    try:
        if error:
            future.set_exception(value)
        else:
            future.set_result(value)
    except InvalidStateError:
        pass


_serial = threading.local()


def on_serial_thread() -> bool:
    """Whether the calling thread is a ``SerialThread``'s (a disk or reader thread: what runs on it holds
    up what was given to it next)."""
    return getattr(_serial, "on", False)


class SerialThread:
    """One thread that runs what is given to it, one thing at a time: a batcher's disk thread (its answers
    read and written there: a slow or locked disk holds up only this thread), its rows thread (a result made
    from an answer), a reader's texts thread (a report text read is handed to its row there). What is given
    ``first`` runs before everything given without it that has not started (a batcher's answers are stored
    ahead of the cache reads of a table's rows queued before them: the engine's answers are not held behind
    thousands of reads); otherwise in order. Started on first use, and again after ``close`` (a batcher used
    after it was closed). When the interpreter exits, what is queued runs first; after, a call runs in the
    caller's thread. A coroutine awaiting ``run`` is told on its loop: no future but its own is made."""

    def __init__(self, name: str = "xladdin-disk"):
        self.name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._first: collections.deque[tuple[Callable[..., Any], tuple[Any, ...], Any]] = collections.deque()
        self._rest: collections.deque[tuple[Callable[..., Any], tuple[Any, ...], Any]] = collections.deque()
        self._thread: threading.Thread | None = None
        self._ending = False  # ``close`` (or the interpreter's exit): the thread runs what is queued, then ends

    def submit(self, fn: Callable[..., Any], *args: Any, first: bool = False) -> Future:
        """A future of ``fn(*args)``, run on the thread after everything submitted before it (``first``:
        before all not given first that wait)."""
        done: Future = Future()
        if not self._put((fn, args, done), first):  # the interpreter is exiting: run it here
            _run_one(fn, args, done)
        return done

    def post(self, fn: Callable[..., Any], *args: Any, first: bool = False) -> bool:
        """``fn(*args)`` queued with no future (what it does tells whom it must; a failure is logged); False
        when the thread takes nothing more (the interpreter is exiting)."""
        return self._put((fn, args, None), first)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on the thread, awaited (from the loop: the loop thread reads no disk)."""
        loop = asyncio.get_running_loop()
        told = loop.create_future()
        if not self._put((fn, args, (loop, told)), False):
            return fn(*args)
        return await told

    def _put(self, item: tuple[Callable[..., Any], tuple[Any, ...], Any], first: bool) -> bool:
        with self._lock:
            thread = self._thread
            ours = thread is threading.current_thread()  # queued by what runs on it: it runs before the end
            if thread is None or (self._ending and not ours):
                if _exiting:
                    return False
                if thread is not None:  # closing: its end waited for, then a new one started
                    self._lock.release()
                    try:
                        thread.join()
                    finally:
                        self._lock.acquire()
                if self._thread is None or self._thread is thread:
                    thread = threading.Thread(target=self._serve, name=f"{self.name}_0", daemon=True)
                    try:
                        thread.start()
                    except RuntimeError:  # no thread to be had at the interpreter's exit
                        return False
                    self._thread, self._ending = thread, False
                    _serials.add(self)
            (self._first if first else self._rest).append(item)
            self._wake.notify()
        return True

    def _serve(self) -> None:
        _serial.on = True
        while True:
            with self._lock:
                while not (self._first or self._rest or self._ending):
                    self._wake.wait()
                if not (self._first or self._rest):
                    if self._thread is threading.current_thread():
                        self._thread, self._ending = None, False
                    return
                fn, args, done = (self._first or self._rest).popleft()
            _run_one(fn, args, done)

    def close(self, last: Callable[[], Any] | None = None) -> None:
        """Stop the thread once everything queued has run (the answers still to store), ``last`` after
        them on the thread (closing its connections) when it was started."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            if last is not None:
                self._rest.append((last, (), None))
            self._ending = True
            self._wake.notify()
        if thread is not threading.current_thread():
            thread.join()


def _run_one(fn: Callable[..., Any], args: tuple[Any, ...], done: Any) -> None:
    """``fn(*args)``, its outcome told to ``done``: a future, a (loop, awaiting future) pair, or nobody."""
    if isinstance(done, Future):
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(fn(*args))
        except BaseException as e:
            done.set_exception(e)
        return
    try:
        value, error = fn(*args), None
    except BaseException as e:
        value, error = None, e
    if done is None:
        if error is not None:
            log.error("%s failed on its thread", getattr(fn, "__qualname__", fn), exc_info=error)
        return
    loop, told = done
    try:
        loop.call_soon_threadsafe(_tell, told, value, error)
    except RuntimeError:  # its loop has stopped (the batcher closed): nobody awaits it any more
        pass


def _tell(told: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if told.done():  # its coroutine was cancelled meanwhile
        return
    if error is None:
        told.set_result(value)
    else:
        told.set_exception(error)


_serials: weakref.WeakSet[SerialThread] = weakref.WeakSet()
_exiting = False


def _at_exit() -> None:
    """The interpreter exits: every serial thread runs what is queued (answers still to store), then ends."""
    global _exiting
    _exiting = True
    for serial in list(_serials):
        serial.close()


if hasattr(threading, "_register_atexit"):  # before the interpreter joins its threads (as concurrent.futures)
    threading._register_atexit(_at_exit)
else:  # pragma: no cover
    import atexit

    atexit.register(_at_exit)


class LoopThread:
    """One asyncio loop running on a daemon thread, started on first use (thread-safe)."""

    def __init__(self, name: str):
        self.name = name
        self._lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self.loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self.loop, self._thread = loop, thread
            return self.loop

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.get())

    def stop(self, last: Callable[[], Coroutine[Any, Any, None]], timeout: float = 30) -> bool:
        """Run ``last()`` on the loop and cancel what still runs there (waiting up to ``timeout``),
        then stop the loop and its thread. False when it was not running."""
        with self._lock:
            loop, thread = self.loop, self._thread
            self.loop = self._thread = None
        if loop is None or thread is None:
            return False

        async def finish() -> None:
            await last()
            # what is still running (a request waiting for an engine that never started) is cancelled,
            # not destroyed with the loop
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(finish(), loop).result(timeout)
        except concurrent.futures.TimeoutError:
            log.warning("the engine did not stop within %g s; closing anyway", timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        return True
