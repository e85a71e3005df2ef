"""What a request comes to, at once: ``Done``, ``Pending`` or ``Failed``.

The resolver owns each request's fate for every front door, in one table (``Fates``): by the
request's input (the task and the row's values; a report file by its stamp) its result once
answered, its ticket while it is asked (a second caller gets the same ticket: nothing is prepared,
keyed or looked up in the disk cache again), or its failure for ``ERROR_TTL`` seconds (a down engine
is not asked again in a loop). What the table does not hold goes to the disk cache through the
batcher (one read, on its disk thread), then the engine. ``resolve`` never blocks, on the disk or
the engine (Excel cells): before the engine has started, the ticket covers the start too; a caller
may wait a bounded time for the disk reads of its tickets (``cache.Ticket.read``: the cell doors do,
so a reopened workbook's hits are values at once). ``map`` (the CLI, the Refresh macro, pandas)
resolves a whole table the same way (its rows pipelined: this thread prepares, the disk thread
reads, the loop asks), then waits for its tickets, with a bound.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import hashlib
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from .. import collector
from ..errors import EngineStalled, XladdinError, internal_error, row_error
from ..reading import documents
from ..tasks.base import Task
from ..version import source_digest
from .batcher import Batcher
from .cache import ERROR_TTL, Failures, Ticket, fail, settle
from .readers import on_disk

MEMO_ROWS = 50_000
ROWS_AHEAD = 256  # requests a thread making many asks beyond the engine's window (``map``, ``Pacer``)
PACE_RESUME = 32  # a paced thread (``Pacer``) is woken once this many of its requests are answered, not by each
FILES_AHEAD = 64  # report-file rows a table asks beyond the engine's window, at least (``Resolver.map``)


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


def _frozen(value: Any) -> Hashable:
    """``value`` as a key: a range (lists) as tuples, a record (a dict) as its items."""
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _memo_key(identity: Hashable, record: Any) -> Hashable | None:
    """The request's key in ``Fates``. Every input has one: a request without a key would be asked
    again on every recalculation, and a cell recalculated when its request fails (the cell service,
    Calc) would ask again at once, in a loop."""
    key = (identity, _frozen(record))
    try:
        hash(key)
    except TypeError:  # a value no sheet passes (an object): no memo for it
        return None
    return key


class Fates:
    """One request's fate by its input (``_memo_key``): ``Done`` (the result), ``Pending`` (the ticket
    every caller of it waits on) or ``Failed`` (its error, remembered as every failure is: ``lifecycle.Failures``,
    for ``ttl`` seconds, then the request is asked again), and who waits on the pending ones: each cell or
    Calc call (``watch``) with its tickets still out. The done are bounded by ``rows`` (the oldest forgotten
    first: they are in the disk cache)."""

    def __init__(self, rows: int, ttl: float):
        self.rows = rows
        self.failures = Failures(ttl, kept=rows)
        self._lock = threading.Lock()
        self._table: collections.OrderedDict[Hashable, Done | Pending] = collections.OrderedDict()
        self._waiters: dict[Hashable, int] = {}  # a cell or call → its tickets not yet settled

    def watch(self, who: Hashable, tickets: list[concurrent.futures.Future],
              result: Any) -> concurrent.futures.Future | None:
        """The call's future: set to ``result`` once all ``tickets`` have settled, after their fates are kept
        here (so what its waiter runs then finds them done or failed); ``None`` when ``who`` already waits
        (an earlier call of that cell is told then). The resolver calls nobody: the door's own function is
        the future's callback."""
        with self._lock:
            if who in self._waiters:
                return None
            self._waiters[who] = len(tickets)
        settled: concurrent.futures.Future = concurrent.futures.Future()

        def one(_: concurrent.futures.Future) -> None:
            with self._lock:
                self._waiters[who] -= 1
                if self._waiters[who]:
                    return
                del self._waiters[who]
            settled.set_result(result)

        for ticket in tickets:
            ticket.add_done_callback(one)
        return settled

    @property
    def waiting(self) -> int:
        """The cells and calls waiting on a ticket."""
        with self._lock:
            return len(self._waiters)

    def get(self, key: Hashable | None) -> Outcome | None:
        if key is None:
            return None
        fate = self._table.get(key)
        if isinstance(fate, Pending) and fate.ticket.done():  # settled, its callbacks not yet run: keep it now
            self._settled(key, fate.ticket)
            fate = self._table.get(key)
        if fate is None:  # failed: while its time lasts
            error = self.failures.get(key)
            return None if error is None else Failed(error)  # type: ignore[arg-type]
        return fate

    def pending(self, key: Hashable | None, ticket: concurrent.futures.Future) -> None:
        """``ticket`` is the request's until it settles; then its result or its failure."""
        if key is None:
            return
        self._set(key, Pending(ticket))
        ticket.add_done_callback(functools.partial(self._settled, key))  # before any caller's own callback

    def _settled(self, key: Hashable, ticket: concurrent.futures.Future) -> None:
        """A ticket's outcome, kept for the callers that asked: the result (so the cell recalculated when
        its ticket settles gets it whether or not the disk cache works), or the failure for ``ttl``."""
        with self._lock:
            if not (isinstance(self._table.get(key), Pending) and self._table[key].ticket is ticket):
                return  # replaced meanwhile
            if ticket.cancelled():
                del self._table[key]
                return
        error = ticket.exception()
        if error is None:
            self.failures.forget(key)
            self._set(key, Done(ticket.result()))
        else:  # the failure kept before the ticket goes: a look between finds one or the other
            self.failures.put(key, row_error(error))
            with self._lock:
                if isinstance(self._table.get(key), Pending) and self._table[key].ticket is ticket:
                    del self._table[key]

    def _set(self, key: Hashable | None, fate: Done | Pending) -> None:
        if key is None:
            return
        with self._lock:
            self._table[key] = fate
            self._table.move_to_end(key)
            if len(self._table) > self.rows:
                self._table.popitem(last=False)

    def __len__(self) -> int:
        return len(self._table)


def hand_over() -> None:
    """Let the threads that carry a request on run now (the disk thread reads its cache entry, the engine's
    loop sends it). A table's rows are prepared on the caller's thread in one CPU-bound run; without a pause
    after each, the first 1,024 of a 5,400-row pool reached a server that answers in ~4 s (an H200 with
    ~1,000 running) only once every row was prepared, while the GPU waited (``python -m bench ramp``). Only
    the rows that fill the engine's window pause, and only in a table larger than it: later, each pause
    waits for threads then busy with answers (against answers in 10-50 ms, pausing after every row made a
    2,000-row table 1.4-1.6x slower), and a table the window holds (300 rows) was sent sooner without."""
    time.sleep(0)


class Resolver:
    def __init__(self, batcher: Batcher, *, error_ttl: float = ERROR_TTL, memo_rows: int = MEMO_ROWS):
        self.batcher = batcher
        # (task identity, input values) → the request's fate: a recalculation of an open workbook skips
        # parsing, hashing and the disk entirely, and a cell asked again while its request is out joins it
        self.fates = Fates(memo_rows, error_ttl)
        self.memo_hits = 0  # requests answered from memory (QWEN_STATUS's hit rate counts them)

    @property
    def error_ttl(self) -> float:
        return self.fates.failures.ttl

    @error_ttl.setter
    def error_ttl(self, seconds: float) -> None:
        self.fates.failures.ttl = seconds

    def resolve(self, task: Task, record: Any) -> Outcome:
        """What ``record`` comes to now. A report file is known by a stat: an answered one is found in
        memory without opening it, or on disk by the same stamp (its result kept by its input: its text is
        not loaded); one not read yet is read by the batcher's ``Reader`` (off this thread) and its request
        follows when it is read."""
        try:
            record, path = documents.report_path(record)
            if path is None:
                memo_key = _memo_key(task.identity(), record)
            else:
                stamp = self.batcher.reader.stamp(path)
                memo_key = _memo_key(task.identity(), {**record, documents.FIELD: stamp})
        except XladdinError as e:
            return Failed(e)
        fate = self.fates.get(memo_key)
        if fate is not None:
            self.memo_hits += isinstance(fate, Done)
            return fate
        if path is None:
            return self._resolve(task, record, memo_key)
        # its read: the result kept by the input, the text's in the store, then (found) the answer's in the cache
        ticket = Ticket()
        ticket.read = concurrent.futures.Future()
        self.fates.pending(memo_key, ticket)
        kept = self._kept_key(task, memo_key)
        if kept is None:
            self._with_text(task, record, path, ticket, None)
        else:
            self.batcher.disk.submit(self._recall, task, record, path, ticket, kept, stamp)
        return Pending(ticket)

    def _kept_key(self, task: Task, memo_key: Hashable | None) -> str | None:
        """The key a report row's result is kept under on disk: its input (the file by its stamp), the task as
        fitted to the engine, the model and sampling, and the code that made it (``version.source_digest``);
        ``None`` before the engine has named its model, without a disk cache or the package's source, or for an
        input with no stable spelling."""
        batcher = self.batcher
        if memo_key is None or not batcher.ready or not batcher.cache.enabled or not batcher.reader.keeps_results:
            return None
        code = source_digest()
        if not code:
            return None
        spelled = repr((code, batcher.fit(task).identity(), batcher.learned.model_id, batcher.params, memo_key))
        if " at 0x" in spelled:  # an object's address: another in the next process
            return None
        return hashlib.sha256(spelled.encode("utf-8")).hexdigest()

    def _recall(self, task: Task, record: dict[str, Any], path: documents.ReportPath, ticket: Ticket,
                kept: str, stamp: Any) -> None:
        """On the disk thread: the row's result kept under ``kept`` and its file's content (``readers.on_disk``:
        a file replaced with its size and time kept is another input), else its text (and then its answer)."""
        if ticket.cancelled():
            ticket.read_done()
            return
        kept = hashlib.sha256(f"{kept}|{on_disk(stamp)}".encode()).hexdigest()
        found = self.batcher.recall(kept)  # ``None`` too for one that does not load: it is made again
        if found is None:
            self._with_text(task, record, path, ticket, kept)
            return
        settle(ticket, found)
        ticket.read_done()

    def _with_text(self, task: Task, record: dict[str, Any], path: documents.ReportPath, ticket: Ticket,
                   kept: str | None) -> None:
        """The row with its report's text: at once when the reader has it in memory, else once it is read."""
        try:
            _, text = self.batcher.reader.text(path)
        except XladdinError as e:
            fail(ticket, e)
            ticket.read_done()
            return
        if isinstance(text, str):
            self._answer(task, record, path, text, ticket, kept)
            return
        looked = getattr(text, "read", None)
        if looked is None:  # a reader process has it: no disk read to wait for
            ticket.read_done()
        else:  # not found in the store: the file goes to a reader, nothing more to wait for
            looked.add_done_callback(lambda _: text.done() or ticket.read_done())
        text.add_done_callback(functools.partial(self._read, task, record, path, ticket, kept))

    def _read(self, task: Task, record: dict[str, Any], path: documents.ReportPath, ticket: Ticket,
              kept: str | None, text: concurrent.futures.Future) -> None:
        """A report file read (or not): its row resolved into ``ticket``."""
        try:
            value = text.result()
        except Exception as e:  # the file's error; a bug on one row is that row's value
            fail(ticket, e)
            ticket.read_done()
            return
        self._answer(task, record, path, value, ticket, kept)

    def _answer(self, task: Task, record: dict[str, Any], path: documents.ReportPath, text: str, ticket: Ticket,
                kept: str | None) -> None:
        """A report row with its text asked on ``ticket`` itself (the batcher settles it, and does its ``read``
        once the answer's read of the cache is); a result the model's answer made is kept under ``kept``."""
        if ticket.cancelled():
            ticket.read_done()
            return
        try:
            inp = task.parse(documents.with_text(record, path, text))
            if kept is not None:
                ticket.add_done_callback(functools.partial(self._keep, kept))
            self.batcher.resolve(task, inp, ticket)
        except Exception as e:  # a bug on one row is that row's value
            fail(ticket, e)
            ticket.read_done()

    def _keep(self, kept: str, ticket: Ticket) -> None:
        """A result made from the model's answer, kept on disk by the row's input."""
        if not ticket.cancelled() and ticket.exception() is None and ticket.answered:
            self.batcher.keep(kept, ticket.result())

    def _resolve(self, task: Task, record: Any, memo_key: Hashable | None) -> Outcome:
        try:
            ticket = self.batcher.resolve(task, task.parse(record))
        except XladdinError as e:
            return Failed(e)
        self.fates.pending(memo_key, ticket)
        return Pending(ticket)

    def map(self, task: Task, rows: Iterable[Any], on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
        """Results in input order; a bad row or a failed request is its ``XladdinError`` in place
        (an engine that cannot start is every row's error). Bounded: when no answer at all arrives
        and the engine shows no sign of working for the batcher's ``request_timeout``, the engine has
        stalled and every row still waiting is that error (its request is cancelled). The garbage
        collector is set for many requests while it runs (``collector.relaxed``)."""
        with collector.relaxed():
            return self._map(task, list(rows), on_result)

    def _map(self, task: Task, rows: list[Any], on_result: Callable[[int, Any], None] | None) -> list[Any]:
        results: list[Any] = [None] * len(rows)
        tickets: dict[concurrent.futures.Future, list[int]] = {}  # a ticket, the rows waiting on it (one fate)

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
        # the rows that fill the engine's window at its widest, when the table holds more (``hand_over``): a
        # table the window holds is prepared at once and sent whole, and a pause only delays it
        filling = self.batcher.window.cap if len(rows) > self.batcher.window.cap else 0
        # Each ticket reports itself as it settles. (concurrent.futures.wait(FIRST_COMPLETED) in a loop
        # installs a waiter on every pending ticket per answer: quadratic, and on a 5,400-row pool the
        # waiting thread took the GIL from the thread doing the requests.)
        settled: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()
        waiting: set[concurrent.futures.Future] = set()
        files: set[concurrent.futures.Future] = set()  # the waiting tickets of rows with a report file
        timeout = wait = self.batcher.request_timeout
        stalled: EngineStalled | None = None

        def take() -> bool:
            """One settled ticket's rows settled, waited for; False when none is waiting, or the engine
            stalled: every row still waiting is then that error (its request cancelled)."""
            nonlocal wait, stalled
            while waiting:
                try:
                    ticket = settled.get(timeout=wait)
                except queue.Empty:
                    quiet = time.monotonic() - self.batcher.last_sign_of_life()
                    if timeout is not None and quiet < timeout:  # still working (a slow engine): wait on
                        wait = timeout - quiet
                        continue
                    stalled = EngineStalled(f"no answer within {timeout:g}s ({self.batcher.engine.describe()})")
                    self.batcher.count_timed_out(getattr(t, "key", None) or f"row {tickets[t][0]}" for t in waiting)
                    for ticket in waiting:
                        ticket.cancel()
                        for i in tickets[ticket]:
                            settle(i, self._alone(task, rows[i], stalled))
                    waiting.clear()
                    files.clear()
                    return False
                waiting.discard(ticket)
                files.discard(ticket)
                try:
                    value = ticket.result()
                except Exception as e:  # the row's error; a bug in one row never loses the others
                    value = row_error(e)
                for i in tickets[ticket]:
                    settle(i, value)
                return True
            return False

        for i, row in enumerate(rows):
            # Rows with a report file are asked at most the engine's window (and the readers' share) ahead of
            # their answers: each holds its whole report until answered, and readers or the disk store
            # faster than the engine would otherwise hold every report of the table at once.
            with_file = _names_file(row)
            while with_file and len(files) >= self.batcher.window.limit + self._files_ahead() and take():
                pass
            while len(waiting) >= self.batcher.window.limit + ROWS_AHEAD and take():  # (``Pacer``)
                pass
            if stalled is not None:
                settle(i, self._alone(task, row, stalled))
                continue
            try:
                outcome = self.resolve(task, row)
            except Exception as e:  # a bug on one row is that row's value
                outcome = Failed(internal_error(e))
            if i < filling:
                hand_over()
            if isinstance(outcome, Pending):
                ticket = outcome.ticket
                if ticket not in tickets:
                    waiting.add(ticket)
                    ticket.add_done_callback(settled.put)
                tickets.setdefault(ticket, []).append(i)
                if with_file:
                    files.add(ticket)
            else:
                settle(i, outcome.result if isinstance(outcome, Done) else outcome.error)
        while take():
            pass
        return results

    def _files_ahead(self) -> int:
        """Report-file rows asked beyond the engine's window: enough to keep every reader process busy (a
        reader of texts read before, a Ray actor's ``ReadAhead``, has none)."""
        return max(FILES_AHEAD, 4 * getattr(self.batcher.reader, "processes", 0))

    def _alone(self, task: Task, row: Any, error: XladdinError) -> Any:
        """What code alone gives a row whose answer never came (else the error)."""
        try:
            alone = self.batcher.prepare(task, task.parse(documents.attach(row))).alone(error)
        except Exception:  # the row parsed once already; whatever fails now, the error stands
            alone = None
        return error if alone is None else alone


class Pacer:
    """A thread making many requests in a row (a table, the cell service's calls run after their POST) waits
    while more than the engine's window and ``ROWS_AHEAD`` of its requests are unanswered, and goes on once
    ``PACE_RESUME`` of them are (woken by each answer, it went to sleep and woke again for every row, each
    wake a hand-over of the GIL between threads). Made as fast as
    it can, they would pile up in the disk thread's and the loop's queues, the preparing thread holding the
    GIL the loop needs to take the answers in and send the next: against a server answering in 10-50 ms the
    engine got ~200 requests a second while a 5,400-row table was prepared, and ~1,000 once it was. A wait
    is bounded by the engine's ``request_timeout``; one that ends with no answer (a stalled engine) ends the
    pacing until an answer comes: the calls then go on at once, each its own error in its time, not one
    wait after another."""

    def __init__(self, batcher: Batcher):
        self.batcher = batcher
        self._out: set[concurrent.futures.Future] = set()
        self._changed = threading.Condition()
        self._stalled = False  # a wait saw no answer within the engine's time: no pacing until one comes

    def add(self, tickets: Iterable[concurrent.futures.Future]) -> None:
        """``tickets`` are the thread's too; returns once few enough of its requests are unanswered."""
        for ticket in tickets:
            with self._changed:
                if ticket in self._out:
                    continue
                self._out.add(ticket)
            ticket.add_done_callback(self._answered)
        with self._changed:
            while not self._stalled and len(self._out) >= self.batcher.window.limit + ROWS_AHEAD:
                if not self._changed.wait(self.batcher.request_timeout):
                    self._stalled = True

    def _answered(self, ticket: concurrent.futures.Future) -> None:
        with self._changed:
            self._out.discard(ticket)
            self._stalled = False
            if len(self._out) <= self.batcher.window.limit + ROWS_AHEAD - PACE_RESUME:
                self._changed.notify()


def _names_file(row: Any) -> bool:
    """Whether ``row`` names a report file (its request then holds the file's whole text)."""
    try:
        return documents.report_path(row)[1] is not None
    except XladdinError:
        return False

