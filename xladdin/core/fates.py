"""What each request comes to, in one table (``Fates``): one future (``Fate``) per request, by its input.

A front door asks (``Resolver.resolve``, ``Batcher.load``) and is given the request's one future: the one
already in the table for its key, or a new one put there whose coroutine the loop then runs (aiodataloader's
``load(key)``). A request is known by two keys, the same future under both: its input (the task and the
row's values, a report file by its stamp) as a door asks it, and its cache key once it is prepared (the same
request asked under another input, or by another door, joins it). The future holds, in turn, that the
request is out, its result (the last ``rows`` results kept: they are also on the disk), or its failure,
given at once for ``ttl`` seconds (a sheet of cells recalculated when their request fails would otherwise
ask again at once, in a loop; a down engine would be waited for by every cell in turn), then forgotten and
asked again. The engine's start is a fate of the table too (``START``): a failed start is every request's
error for its time.

A fate is ``looked`` once its disk read is done (a hit has settled it; a miss has gone on, to the engine or a
reader process): a cell's thread may wait for that, bounded (``wait_looked``), never for the rest. The cells
and calls waiting on their fates are here too (``watch``): a door is told by the call's future.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Hashable, Iterable
from typing import Any

log = logging.getLogger(__name__)

ERROR_TTL = 30.0  # seconds a failure is the answer before its key is tried again
KEPT = 50_000  # failures remembered at most (the oldest forgotten first)
ROWS = 100_000  # fates kept (two keys a request: 50,000 requests); the oldest forgotten first
START = ("the engine's start",)  # the engine's start's key in the table


class Failures:
    """Each key's last failure while its ``ttl`` lasts (a report file's read, in the reader). Thread-safe."""

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


class Fate(concurrent.futures.Future):
    """One request's future. ``key``: its cache key once prepared; ``looked``: its disk read is done."""

    def __init__(self) -> None:
        super().__init__()
        self.key: str | None = None
        self.looked = False

    def _invoke_callbacks(self) -> None:
        """Each callback run once, then let go (``Future`` keeps them): the callbacks of a fate hold it (a
        waiting call's, the table's), and kept they made every request's futures, closures and task a cycle
        only the garbage collector freed (in a 5,400-cell recalculation its collections took a tenth of the
        cell service's time)."""
        callbacks, self._done_callbacks = self._done_callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("exception calling callback for %r", self)


class Fates:
    """The one table: key → ``Fate`` (see the module's docstring). Thread-safe."""

    def __init__(self, rows: int = ROWS, ttl: float = ERROR_TTL):
        self.rows, self.ttl = rows, ttl
        self._lock = threading.Lock()
        self._looks = threading.Condition(self._lock)  # a fate looked or settled, told to ``wait_looked``
        self._lookers = 0  # threads in ``wait_looked``
        self._table: collections.OrderedDict[Hashable, Fate] = collections.OrderedDict()
        self._failed_at: dict[Hashable, float] = {}
        self._waiters: dict[Hashable, int] = {}  # a cell or call → its fates not yet settled

    def get(self, key: Hashable | None) -> Fate | None:
        """``key``'s fate while the table holds it: out, answered, or failed while its time lasts."""
        if key is None:
            return None
        with self._lock:
            return self._get(key)

    def _get(self, key: Hashable) -> Fate | None:
        fate = self._table.get(key)
        if fate is None or not fate.done():
            return fate
        if fate.cancelled():  # given up on (a table's bound): asked again
            self._drop(key)
            return None
        if key in self._failed_at and time.monotonic() - self._failed_at[key] >= self.ttl:
            self._drop(key)
            return None
        return fate

    def claim(self, key: Hashable | None) -> tuple[Fate, bool]:
        """``key``'s fate, and whether it is new (its caller then makes it: nobody else will)."""
        with self._lock:
            found = None if key is None else self._get(key)
            if found is not None:
                return found, False
            fate = Fate()
            if key is not None:
                self._put(key, fate)
        if key is not None:
            fate.add_done_callback(functools.partial(self._settled, key))
        return fate, True

    def join(self, key: Hashable, fate: Fate) -> Fate | None:
        """``fate`` under ``key`` too (a request's cache key once prepared); or the other fate already there
        (the same request asked under another input): the caller follows it."""
        with self._lock:
            found = self._get(key)
            if found is not None and found is not fate:
                return found
            self._put(key, fate)
        fate.add_done_callback(functools.partial(self._settled, key))
        return None

    def close(self, error: BaseException) -> None:
        """Every fate still out fails with ``error`` and leaves the table (asked again after), with the
        start's: a batcher closed starts its engine again when used again."""
        with self._lock:
            out = [(k, f) for k, f in self._table.items() if not f.done() or k == START]
            for key, _ in out:
                self._drop(key)
        for _, fate in out:
            if not fate.done():
                try:
                    fate.set_exception(error)
                except concurrent.futures.InvalidStateError:
                    pass

    def looked(self, fate: Fate) -> None:
        """``fate``'s disk read is done and it goes on (to the engine, or a reader process)."""
        fate.looked = True
        if self._lookers:
            with self._lock:
                self._looks.notify_all()

    def wait_looked(self, fates: Iterable[Fate], timeout: float) -> None:
        """Until each of ``fates`` is looked or settled, at most ``timeout`` seconds."""
        fates = list(fates)
        with self._lock:
            self._lookers += 1
            try:
                self._looks.wait_for(lambda: all(f.looked or f.done() for f in fates), timeout)
            finally:
                self._lookers -= 1

    def _put(self, key: Hashable, fate: Fate) -> None:
        self._table[key] = fate
        self._table.move_to_end(key)
        self._failed_at.pop(key, None)
        while len(self._table) > self.rows:
            oldest = next(iter(self._table))
            if oldest == START:
                self._table.move_to_end(oldest)
                oldest = next(iter(self._table))
            self._drop(oldest)

    def _drop(self, key: Hashable) -> None:
        self._table.pop(key, None)
        self._failed_at.pop(key, None)

    def _settled(self, key: Hashable, fate: Fate) -> None:
        """A fate's outcome kept for its time: its failure's moment, or gone when it was given up on."""
        with self._lock:
            if self._table.get(key) is fate:
                if fate.cancelled():
                    self._drop(key)
                elif fate.exception() is not None:
                    self._failed_at[key] = time.monotonic()
            if self._lookers:
                self._looks.notify_all()

    def watch(self, who: Hashable, fates: list[concurrent.futures.Future],
              result: Any) -> concurrent.futures.Future | None:
        """The call's future: set to ``result`` once all ``fates`` have settled; ``None`` when ``who`` already
        waits (an earlier call of that cell is told then). The core calls nobody: the door's own function is
        the future's callback."""
        with self._lock:
            if who in self._waiters:
                return None
            self._waiters[who] = len(fates)
        settled: concurrent.futures.Future = concurrent.futures.Future()

        def one(_: concurrent.futures.Future) -> None:
            with self._lock:
                self._waiters[who] -= 1
                if self._waiters[who]:
                    return
                del self._waiters[who]
            settled.set_result(result)

        for fate in fates:
            fate.add_done_callback(one)
        return settled

    @property
    def waiting(self) -> int:
        """The cells and calls waiting on a fate."""
        with self._lock:
            return len(self._waiters)

    def __len__(self) -> int:
        return len(self._table)
