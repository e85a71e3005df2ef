"""What the batcher needs around its queue: an asyncio loop on its own thread, one shared start of the
engine, and the one rule of every memory of a failure.

**Failures remembered for a while** (``Failures``: a request's, the engine's start, a report file's read).
A failure is the answer, given at once, for ``ERROR_TTL`` seconds (a sheet of cells recalculated when
their request fails would otherwise ask again at once, in a loop; a down engine would be waited for by
every cell in turn); then it is forgotten and the key is tried again.

The engine starts on the loop, once, shared by every request that arrives meanwhile (``SharedStart``); its
failure is remembered so and raised at once, so a sheet of cells asking meanwhile gets the error instead of
each waiting for the engine again.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any

from ..errors import EngineError

log = logging.getLogger(__name__)

ERROR_TTL = 30.0  # seconds a failure is the answer before its key is tried again
KEPT = 50_000  # failures remembered at most (the oldest forgotten first)


class Failures:
    """Each key's last failure while its ``ttl`` lasts. Thread-safe."""

    def __init__(self, ttl: float = ERROR_TTL, kept: int = KEPT):
        self.ttl, self.kept = ttl, kept
        self._lock = threading.Lock()
        self._failed: collections.OrderedDict[Hashable, tuple[float, BaseException]] = collections.OrderedDict()

    def get(self, key: Hashable) -> BaseException | None:
        """``key``'s failure while its time lasts, else ``None`` (and it is forgotten)."""
        with self._lock:
            failed = self._failed.get(key)
            if failed is None:
                return None
            if time.monotonic() - failed[0] < self.ttl:
                return failed[1]
            del self._failed[key]
            return None

    def put(self, key: Hashable, error: BaseException) -> None:
        """``key`` failed now with ``error``."""
        with self._lock:
            self._failed[key] = (time.monotonic(), error)
            self._failed.move_to_end(key)
            while len(self._failed) > self.kept:
                self._failed.popitem(last=False)

    def forget(self, key: Hashable) -> None:
        """``key`` succeeded: no failure of it is the answer any more."""
        with self._lock:
            self._failed.pop(key, None)

    def __len__(self) -> int:
        return len(self._failed)


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


class SharedStart:
    """``start`` run once at a time on the loop; everyone asking meanwhile awaits the same one."""

    def __init__(self, start: Callable[[], Awaitable[None]], retry_s: float = ERROR_TTL):
        self._start = start
        self._failed = Failures(retry_s, kept=1)  # the start's, under the one key None
        self._running: asyncio.Future | None = None

    def raise_recent_failure(self) -> None:
        failed = self._failed.get(None)
        if failed is not None:
            raise failed

    async def __call__(self) -> None:
        if self._running is None:
            self._running = asyncio.ensure_future(self._start())
        running = self._running
        try:
            await asyncio.shield(running)
        except EngineError as e:
            self._failed.put(None, e)
            raise
        finally:
            if running.done() and self._running is running:
                self._running = None
        self._failed.forget(None)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_parent(pid: int) -> None:
    """For a process of ours (a private server, a report reader): on Linux, when ``pid`` is its parent,
    the kernel kills it when the parent dies (``PR_SET_PDEATHSIG``), however busy it is — no Python code
    has to run for it. The kernel sends it when the parent's *thread* that started this process ends, so
    that thread must live as long as the parent needs the process. Elsewhere the caller watches."""
    import os
    import signal
    import sys

    if not sys.platform.startswith("linux") or os.getppid() != pid:
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # the caller's watcher is left
    if os.getppid() != pid:  # the parent died before the signal was asked for
        os._exit(0)


def watch_parent(pid: int, interval: float = 1.0) -> None:
    """End this process (``os._exit``) once its parent ``pid`` is gone: a daemon thread's loop, for the
    systems without ``PR_SET_PDEATHSIG`` (a hung read in C code releases the interpreter to it)."""
    import os

    while os.getppid() == pid:
        time.sleep(interval)
    os._exit(0)
