"""What a request comes to, at once: ``Done``, ``Pending`` or ``Failed``.

The resolver is every front door's way into the core. A request is known by its input (the task and the
row's values; a report file by its stamp) and has one future, its fate in the batcher's table
(``fates.Fates``): its result once answered, the future itself while it is out (a second caller gets the
same one: nothing is prepared, keyed or read again), or its failure for ``ERROR_TTL`` seconds (a down engine
is not asked again in a loop). A request the table does not hold is parsed here and handed to the batcher
(``Batcher.load``), or, with a report file, is one coroutine on the loop (``_file_row``): its result kept by
its input, else the file's text (the store's or a reader process's), then the request as any other.
``resolve`` never blocks, on the disk or the engine (Excel cells); a caller may wait a bounded time for
the disk reads of its fates (``Fates.wait_looked``: the cell doors do, so a reopened workbook's hits are
values at once). ``map`` (the CLI, the Refresh macro, pandas) resolves a whole table the same way (its
rows pipelined: this thread prepares, the disk thread reads, the loop asks), then waits for its fates, with
a bound.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
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
from .fates import Fate
from .readers import on_disk
from .threads import fail

ROWS_AHEAD = 256  # requests a thread making many asks beyond the engine's window (``map``, ``Pacer``)
PACE_RESUME = 32  # a paced thread (``Pacer``) is woken once this many of its requests are answered, not by each
FILES_AHEAD = 64  # report-file rows a table asks beyond the engine's window, at least (``Resolver.map``)


@dataclass(frozen=True, slots=True)
class Done:
    result: Any


@dataclass(frozen=True, slots=True)
class Pending:
    fate: concurrent.futures.Future


@dataclass(frozen=True, slots=True)
class Failed:
    error: XladdinError


Outcome = Done | Pending | Failed


def _outcome(fate: concurrent.futures.Future) -> Outcome:
    if not fate.done():
        return Pending(fate)
    if fate.cancelled():
        return Pending(fate)  # given up on (a table's bound): the caller asks again
    error = fate.exception()
    return Done(fate.result()) if error is None else Failed(error)  # type: ignore[arg-type]


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
    def __init__(self, batcher: Batcher, *, error_ttl: float | None = None):
        self.batcher = batcher
        # (task identity, input values) → the request's fate: a recalculation of an open workbook skips
        # parsing, hashing and the disk entirely, and a cell asked again while its request is out joins it
        self.fates = batcher.fates
        if error_ttl is not None:
            self.fates.ttl = error_ttl
        self.memo_hits = 0  # requests answered from memory (QWEN_STATUS's hit rate counts them)

    @property
    def error_ttl(self) -> float:
        return self.fates.ttl

    @error_ttl.setter
    def error_ttl(self, seconds: float) -> None:
        self.fates.ttl = seconds

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
        fate, new = self.fates.claim(memo_key)
        if not new:
            outcome = _outcome(fate)
            self.memo_hits += isinstance(outcome, Done)
            return outcome
        if path is None:
            try:
                self.batcher.load(task, task.parse(record), fate)
            except Exception as e:  # bad input, a failed start kept for its time; a bug is that row's value
                fail(fate, e)
        else:
            self.batcher.run_on_loop(fate, self._file_row(task, record, path, stamp, memo_key, fate))
        return _outcome(fate)

    def _kept_key(self, task: Task, memo_key: Hashable | None) -> str | None:
        """The key a report row's result is kept under on disk: its input (the file by its stamp), the task as
        fitted to the engine, the model and sampling, and the code that made it (``version.source_digest``);
        ``None`` without a disk cache or the package's source, or for an input with no stable spelling."""
        batcher = self.batcher
        if memo_key is None or not batcher.cache.enabled or not batcher.reader.keeps_results:
            return None
        code = source_digest()
        if not code:
            return None
        spelled = repr((code, batcher.fit(task).identity(), batcher.learned.model_id, batcher.params, memo_key))
        if " at 0x" in spelled:  # an object's address: another in the next process
            return None
        return hashlib.sha256(spelled.encode("utf-8")).hexdigest()

    async def _file_row(self, task: Task, record: dict[str, Any], path: documents.ReportPath, stamp: Any,
                        memo_key: Hashable | None, fate: Fate) -> Any:
        """On the loop: a report row's result. Once the engine has started: the result kept under its input
        (the file's content too, ``readers.on_disk``: a file replaced with its size and time kept is another
        input), on the disk thread; else its text (at once from memory, else the store's or a reader
        process's: the fate is looked, a cell waits no more), the row parsed with it on the rows thread, and
        its request asked as any other; a result the model's answer made is kept under its input."""
        batcher = self.batcher
        await asyncio.wrap_future(batcher.starting())
        kept = self._kept_key(task, memo_key)
        if kept is not None:
            kept, found = await batcher.disk.run(self._recall, kept, stamp)
            if found is not None:
                return found
        _, text = batcher.reader.text(path, stamp)  # the stamp its input was keyed by: no stat on the loop
        if not isinstance(text, str):
            await batcher.disk.run(_nothing)  # after the store's read of the text, queued before it
            if getattr(text, "looked", True):  # gone to a reader process: a cell waiting for its read waits no more
                self.fates.looked(fate)
            text = await asyncio.wrap_future(text)
        inp = await batcher.rows.run(task.parse, documents.with_text(record, path, text))
        result, answered = await batcher.answer(task, inp, fate)
        if kept is not None and answered:
            batcher.keep(kept, result)
        return result

    def _recall(self, kept: str, stamp: Any) -> tuple[str, Any]:
        """On the disk thread: the key a row's result is kept under with its file's content, and the result
        kept there (``None`` too for one that does not load: it is made again)."""
        kept = hashlib.sha256(f"{kept}|{on_disk(stamp)}".encode()).hexdigest()
        return kept, self.batcher.recall(kept)

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
        fates: dict[concurrent.futures.Future, list[int]] = {}  # a fate, the rows waiting on it (one fate)

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
        # Each fate reports itself as it settles. (concurrent.futures.wait(FIRST_COMPLETED) in a loop
        # installs a waiter on every pending fate per answer: quadratic, and on a 5,400-row pool the
        # waiting thread took the GIL from the thread doing the requests.)
        settled: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()
        waiting: set[concurrent.futures.Future] = set()
        files: set[concurrent.futures.Future] = set()  # the waiting fates of rows with a report file
        timeout = wait = self.batcher.request_timeout
        stalled: EngineStalled | None = None

        def take() -> bool:
            """One settled fate's rows settled, waited for; False when none is waiting, or the engine
            stalled: every row still waiting is then that error (its request cancelled)."""
            nonlocal wait, stalled
            while waiting:
                try:
                    fate = settled.get(timeout=wait)
                except queue.Empty:
                    quiet = time.monotonic() - self.batcher.last_sign_of_life()
                    if timeout is not None and quiet < timeout:  # still working (a slow engine): wait on
                        wait = timeout - quiet
                        continue
                    stalled = EngineStalled(f"no answer within {timeout:g}s ({self.batcher.engine.describe()})")
                    self.batcher.count_timed_out(getattr(t, "key", None) or f"row {fates[t][0]}" for t in waiting)
                    for fate in waiting:
                        fate.cancel()
                        for i in fates[fate]:
                            settle(i, self._alone(task, rows[i], stalled))
                    waiting.clear()
                    files.clear()
                    return False
                waiting.discard(fate)
                files.discard(fate)
                try:
                    value = fate.result()
                except Exception as e:  # the row's error; a bug in one row never loses the others
                    value = row_error(e)
                for i in fates[fate]:
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
                fate = outcome.fate
                if fate not in fates:
                    waiting.add(fate)
                    fate.add_done_callback(settled.put)
                fates.setdefault(fate, []).append(i)
                if with_file:
                    files.add(fate)
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
        """What code alone gives a row whose answer never came (else the error): with its report's text when
        the reader has it, never read here (this is a caller's thread: a cell door's Refresh)."""
        try:
            record, path = documents.report_path(row)
            if path is not None:
                _, text = self.batcher.reader.text(path)
                if not isinstance(text, str):  # not read yet: what the row's fields give
                    text = text.result() if text.done() and text.exception() is None else None
                record = (documents.with_text(record, path, text) if text is not None
                          else {**record, documents.FIELD: None})
            alone = self.batcher.prepare(task, task.parse(record)).alone(error)
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

    def add(self, fates: Iterable[concurrent.futures.Future]) -> None:
        """``fates`` are the thread's too; returns once few enough of its requests are unanswered."""
        for fate in fates:
            with self._changed:
                if fate in self._out:
                    continue
                self._out.add(fate)
            fate.add_done_callback(self._answered)
        with self._changed:
            while not self._stalled and len(self._out) >= self.batcher.window.limit + ROWS_AHEAD:
                if not self._changed.wait(self.batcher.request_timeout):
                    self._stalled = True

    def _answered(self, fate: concurrent.futures.Future) -> None:
        with self._changed:
            self._out.discard(fate)
            self._stalled = False
            if len(self._out) <= self.batcher.window.limit + ROWS_AHEAD - PACE_RESUME:
                self._changed.notify()


def _nothing() -> None:
    return None


def _names_file(row: Any) -> bool:
    """Whether ``row`` names a report file (its request then holds the file's whole text)."""
    try:
        return documents.report_path(row)[1] is not None
    except XladdinError:
        return False

