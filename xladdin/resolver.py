"""What a request comes to, at once: ``Done``, ``Pending`` or ``Failed``.

The resolver owns each request's fate for every front door. It answers from memory (results
already read in this process), else the disk cache through the batcher, joins a request in
flight, or remembers a recent failure for ``ERROR_TTL`` seconds so that a down engine is not
asked again in a loop. ``resolve`` never blocks on the engine (Excel cells): before the engine
has started, the ticket covers the start too. ``map`` (the CLI, the Refresh macro, pandas)
resolves a whole table the same way, then waits for its tickets, with a bound.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from . import documents
from .batcher import Batcher
from .errors import EngineStalled, EngineTimeout, XladdinError, internal_error
from .tasks.base import Task

MEMO_ROWS = 50_000
ERROR_TTL = 30.0  # seconds a failed request is returned as its error before it is asked again


@dataclass(frozen=True, slots=True)
class Done:
    result: Any


@dataclass(frozen=True, slots=True)
class Pending:
    ticket: concurrent.futures.Future


@dataclass(frozen=True, slots=True)
class Failed:
    error: XladdinError


Outcome = Done | Pending | Failed


def _memo_key(identity: Hashable, record: Any) -> Hashable | None:
    try:
        key = (identity, tuple(record.items()) if isinstance(record, dict) else record)
        hash(key)
    except TypeError:  # a value Excel never passes (a list): no memo for it
        return None
    return key


class Resolver:
    def __init__(self, batcher: Batcher, *, error_ttl: float = ERROR_TTL, memo_rows: int = MEMO_ROWS):
        self.batcher = batcher
        self.error_ttl = error_ttl
        self.memo_rows = memo_rows
        self._lock = threading.Lock()
        # (task identity, input values) → result, for answers already read: a recalculation of an
        # open workbook skips parsing, hashing and the disk entirely
        self._memo: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._failed: dict[str, tuple[float, XladdinError]] = {}  # request key → (when, error)
        self.memo_hits = 0  # requests answered from memory (QWEN_STATUS's hit rate counts them)

    def resolve(self, task: Task, record: Any) -> Outcome:
        """What ``record`` comes to now. A report file is known by a stat: an answered one is found in
        memory without opening it; one not read yet is read by the batcher's ``Reader`` (off this
        thread) and its request follows when it is read."""
        try:
            record, path = documents.report_path(record)
            if path is None:
                memo_key = _memo_key(task.identity(), record)
            else:
                stamp, text = self.batcher.reader.text(path)
                memo_key = _memo_key(task.identity(), {**record, documents.FIELD: stamp})
        except XladdinError as e:
            return Failed(e)
        if memo_key is not None and (hit := self._memo.get(memo_key)) is not None:
            self.memo_hits += 1
            return Done(hit)
        if path is None:
            return self._resolve(task, record, memo_key)
        if isinstance(text, str):
            return self._resolve(task, documents.with_text(record, path, text), memo_key)
        ticket: concurrent.futures.Future = concurrent.futures.Future()
        text.add_done_callback(functools.partial(self._read, task, record, path, memo_key, ticket))
        return Pending(ticket)

    def _read(self, task: Task, record: dict[str, Any], path: documents.ReportPath, memo_key: Hashable | None,
              ticket: concurrent.futures.Future, text: concurrent.futures.Future) -> None:
        """A report file read (or not): its row resolved, and ``ticket`` settled with its outcome."""
        if not ticket.set_running_or_notify_cancel():
            return
        try:
            outcome = self._resolve(task, documents.with_text(record, path, text.result()), memo_key)
        except XladdinError as e:
            outcome = Failed(e)
        except Exception as e:  # a bug on one row is that row's value
            outcome = Failed(internal_error(e))
        if isinstance(outcome, Done):
            ticket.set_result(outcome.result)
        elif isinstance(outcome, Failed):
            ticket.set_exception(outcome.error)
        else:
            outcome.ticket.add_done_callback(functools.partial(_forward, ticket))

    def _resolve(self, task: Task, record: Any, memo_key: Hashable | None) -> Outcome:
        try:
            inp = task.parse(record)
            if self._failed:
                failed = self._failed.get(self.batcher.key(task, inp))
                if failed is not None and time.monotonic() - failed[0] < self.error_ttl:
                    return Failed(failed[1])
            res = self.batcher.resolve(task, inp)
        except XladdinError as e:
            return Failed(e)
        if isinstance(res, concurrent.futures.Future):
            # keyed when it settles: before the engine has named its model no key is final
            res.add_done_callback(functools.partial(self._settled, memo_key,
                                                    functools.partial(self.batcher.key, task, inp)))
            return Pending(res)
        self.remember(memo_key, res)
        return Done(res)

    def map(self, task: Task, rows: Iterable[Any], on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Results in input order; a bad row or a failed request is its ``XladdinError`` in place
        (an engine that cannot start is every row's error). Bounded: when no answer at all arrives
        and the engine shows no sign of working for the batcher's ``request_timeout``, the engine has
        stalled and every row still waiting is that error (its request is cancelled)."""
        rows = list(rows)
        results: list[Any] = [None] * len(rows)
        tickets: dict[concurrent.futures.Future, int] = {}

        def settle(i: int, value: Any) -> None:
            results[i] = value
            if on_result:
                on_result(i, value)

        try:  # a table waits for the engine to start (loading a model may take long), outside the bound
            self.batcher.start()
        except XladdinError as e:
            for i in range(len(rows)):
                settle(i, e)
            return results
        for i, row in enumerate(rows):
            try:
                outcome = self.resolve(task, row)
            except Exception as e:  # a bug on one row is that row's value
                outcome = Failed(internal_error(e))
            if isinstance(outcome, Pending):
                tickets[outcome.ticket] = i
            else:
                settle(i, outcome.result if isinstance(outcome, Done) else outcome.error)
        # Each ticket reports itself as it settles. (concurrent.futures.wait(FIRST_COMPLETED) in a loop
        # installs a waiter on every pending ticket per answer: quadratic, and on a 5,400-row pool the
        # waiting thread took the GIL from the thread doing the requests.)
        settled: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()
        for ticket in tickets:
            ticket.add_done_callback(settled.put)
        waiting = set(tickets)
        timeout = wait = self.batcher.request_timeout
        while waiting:
            try:
                ticket = settled.get(timeout=wait)
            except queue.Empty:
                quiet = time.monotonic() - self.batcher.last_sign_of_life()
                if timeout is not None and quiet < timeout:  # still working (a slow engine): wait on
                    wait = timeout - quiet
                    continue
                stalled = EngineStalled(f"no answer within {timeout:g}s ({self.batcher.engine.describe()})")
                self.batcher.count_timed_out(len(waiting))
                for ticket in waiting:
                    ticket.cancel()
                    settle(tickets[ticket], self._alone(task, rows[tickets[ticket]], stalled))
                break
            waiting.discard(ticket)
            try:
                settle(tickets[ticket], ticket.result())
            except XladdinError as e:
                settle(tickets[ticket], e)
            except Exception as e:  # a bug in one row never loses the others
                settle(tickets[ticket], internal_error(e))
        return results

    def _alone(self, task: Task, row: Any, error: XladdinError) -> Any:
        """What code alone gives a row whose answer never came (else the error)."""
        try:
            alone = self.batcher.prepare(task, task.parse(documents.attach(row))).alone(error)
        except Exception:  # the row parsed once already; whatever fails now, the error stands
            alone = None
        return error if alone is None else alone

    def remember(self, memo_key: Hashable | None, result: Any) -> None:
        if memo_key is None:
            return
        with self._lock:
            self._memo[memo_key] = result
            if len(self._memo) > self.memo_rows:
                self._memo.popitem(last=False)

    def _settled(self, memo_key: Hashable | None, key: Callable[[], str], fut: concurrent.futures.Future) -> None:
        """A ticket's outcome, kept for the callers that asked: the result in memory (so the cell that
        is recalculated when its ticket settles gets it whether or not the disk cache works), an error
        for ``error_ttl``. Runs before the cell's own recalculation callback (added after this one)."""
        if fut.cancelled():
            return
        error = fut.exception()
        if error is None:
            self.remember(memo_key, fut.result())
            return
        if not isinstance(error, XladdinError):
            error = internal_error(error)
        now = time.monotonic()
        with self._lock:
            self._failed = {k: v for k, v in self._failed.items() if now - v[0] < self.error_ttl}
            self._failed[key()] = (now, error)


def _forward(ticket: concurrent.futures.Future, inner: concurrent.futures.Future) -> None:
    """``inner``'s outcome as ``ticket``'s."""
    if inner.cancelled():
        ticket.set_exception(EngineTimeout("cancelled"))
    elif inner.exception() is not None:
        ticket.set_exception(inner.exception())
    else:
        ticket.set_result(inner.result())
