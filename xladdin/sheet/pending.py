"""Pending-cell batching: what the UDFs share.

Desktop Excel calls a UDF once per cell. xlwings' ``async_mode="threading"``
parks every pending call on a thread of a pool of min(32, cores+4) threads, so
a sheet of 500 rows reaches the model in batches of at most that size. We do
not park threads:

1. A UDF call asks the process-wide ``Resolver`` (``xladdin.core.resolver``) for each
   of its rows and gets an outcome at once: ``Done`` (from memory, or the cache read
   on the batcher's disk thread within ``READ_WAIT_S`` — no placeholder, no
   recalculation: a reopened workbook's values at once), ``Failed`` (a bad field,
   or a request that failed within ``ERROR_TTL`` seconds: a down engine is not
   asked again in a loop) or ``Pending`` (the request joined the engine queue, or
   a request in flight, or its disk read took longer than the bound: a slow or
   locked disk).
2. A pending row shows a placeholder of the same shape as its result
   (``#QWEN… pending``).
3. When every pending request of that cell has settled (each answer goes to the
   cache the moment it arrives), the call's future (``Fates.watch``) runs the
   door's own ``told`` — on Windows ``xladdin.excel.udfs.recalculate``, which
   rewrites the cell's formula on xlwings' COM loop with its retry on a busy
   Excel. The UDF runs again: its rows are now ``Done`` or ``Failed``.

This module only turns outcomes into cell values and asks for recalculations.

So 500 filled-down rows become one queue that the batcher feeds to the
engine at its full parallelism, however few threads Excel has. Outside Excel
(``caller`` is None, e.g. tests, scripts, or no COM) a call waits for its
answers instead, up to the request timeout.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import functools
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import collector
from ..core.batcher import Batcher
from ..core.cache import Ticket
from ..core.resolver import Done, Failed, Pacer, Pending, Resolver
from ..errors import EngineStalled, XladdinError
from ..reading.documents import ReportPath, Reports
from ..settings import Settings
from ..tasks.base import Task
from .cells import PENDING, error_row, filler_row

# A door told that a waiting call's answers are in: its own function, a done-callback of the call's future
# (``Fates.watch``) run by that future where the call's last ticket settled; the future's result is the call's
# ``Answered``. Excel's recalculates the cell (its function called again); Calc's and the cell service's settle
# the call with ``Answered.made``, its value made from the answers, instead of running it again.
Told = Callable[[concurrent.futures.Future], None]
# How long one call waits for the disk cache's reads of its rows, all at once (never for the engine): a hit
# read within it is the cell's value at once; past it (a slow or locked disk) the rows are pending.
READ_WAIT_S = 0.5


def caller_key(caller: Any) -> Hashable:
    """What a waiting cell is known by: a door's own key as it is (the cell service's call id), an xlwings
    caller by its book, sheet and address, anything else by its identity (Calc's call)."""
    if isinstance(caller, str):
        return caller
    try:
        return (caller.sheet.book.name, caller.sheet.name, caller.address)
    except Exception:
        return id(caller)


@dataclass(frozen=True, slots=True, eq=False)
class Answered:
    """A waiting call all of whose tickets have settled: the call as its door passed it (``caller``), and its
    cell value made from the tickets' outcomes by the code that made its placeholder (``value``)."""

    caller: Any
    value: Callable[[], Any]
    tickets: tuple[concurrent.futures.Future, ...]

    @property
    def made(self) -> Callable[[], Any] | None:
        """``value``, or ``None`` when a ticket was cancelled (its request is asked again): run the call again."""
        return None if any(t.cancelled() for t in self.tickets) else self.value


class CellRuntime:
    """One resolver (and batcher) for all cells of the process; the cells waiting on its requests are
    in the resolver's fate table (``Fates.watch``)."""

    def __init__(self, settings: Settings | None = None, *, batcher: Batcher | None = None, told: Told | None = None):
        collector.for_many_requests()  # a cell door's process asks many requests (``collector``)
        self._settings = settings
        self._batcher = batcher
        self._resolver: Resolver | None = None
        self.told = told  # the door's: a waiting call's answers are in (``Told``)
        self._lock = threading.Lock()
        self._reads = threading.local()  # ``wait``: how long this thread's calls wait for their disk reads
        self._paced: Pacer | None = None  # the calls run later, paced (``later``)
        self.last_error: str | None = None

    @property
    def batcher(self) -> Batcher:
        with self._lock:
            if self._batcher is None:
                self._settings = settings = self._settings or Settings.load()
                # the engine starts on the first request; a failure to start is that cell's error
                self._batcher = Batcher.from_settings(settings)
            return self._batcher

    @property
    def resolver(self) -> Resolver:
        batcher = self.batcher
        with self._lock:
            if self._resolver is None or self._resolver.batcher is not batcher:
                self._resolver = Resolver(batcher)
            return self._resolver

    @property
    def error_ttl(self) -> float:
        return self.resolver.error_ttl

    @error_ttl.setter
    def error_ttl(self, seconds: float) -> None:
        self.resolver.error_ttl = seconds

    @functools.cached_property
    def max_text_chars(self) -> int | None:
        self.batcher  # noqa: B018  (settings are loaded with the batcher)
        return self._settings.max_text_chars if self._settings else Settings.model_fields["max_text_chars"].default

    @functools.cached_property
    def settings(self) -> Settings:
        """The settings the cells read (``report_dirs``, ``as_of``): the runtime's, or for a batcher given
        without them (Calc's) the user's."""
        self.batcher  # noqa: B018  (settings are loaded with the batcher)
        return self._settings or Settings.load()

    @property
    def as_of(self) -> dt.date | None:
        """The ``as_of`` setting: the day the workbook's cells screen as of (``screen.date_rows``)."""
        return self.settings.as_of

    def read_text(self, path: ReportPath) -> str:
        """A report file's text, read by the batcher's reader (in its processes, waited for here): what
        ``screen.date_rows`` dates a file from that neither its name nor its row dates; its request then
        finds it read."""
        return self.batcher.reader.read_now(path)

    def reports(self, folder: Path | None) -> Reports:
        """Where a workbook's report files may be read from: its folder and the ``report_dirs`` setting
        (made once per workbook folder, not resolved again on every cell's call)."""
        return self._reports_of(folder)

    @functools.cached_property
    def _reports_of(self) -> Callable[[Path | None], Reports]:
        return functools.lru_cache(maxsize=64)(functools.partial(Reports.of, self.settings))

    @property
    def pending_cells(self) -> int:
        with self._lock:
            resolver = self._resolver
        return resolver.fates.waiting if resolver is not None else 0

    def rows(
        self,
        task: Task,
        records: Sequence[Any | None],
        to_row: Callable[[Any], list[Any]],
        width: int,
        caller: Any = None,
        finish: Callable[[int, Any], Any] | None = None,
        shape: Callable[[list[list[Any]]], Any] | None = None,
    ) -> Any:
        """One row of cell values per record (``None`` → a blank row); ``finish(i, result)``: record ``i``'s
        result as its row shows it (``screen.Dating.result``), on every call, memo hits too; ``shape(rows)``:
        the cell value the function gives of its rows (the rows themselves if not given). A call waiting on
        the engine is watched (``Fates.watch``): once its tickets have settled, the call's future runs the
        door's ``told`` with the call's ``Answered``: its value made from their outcomes by the same ``finish``
        and ``shape`` (Calc and the cell service settle the call with it, not running it again; Excel
        recalculates the cell)."""
        resolver = self.resolver

        def row_of(i: int) -> Callable[[Any], list[Any]]:
            return to_row if finish is None else lambda r: to_row(finish(i, r))

        out: list[list[Any] | None] = [None] * len(records)
        waiting: dict[int, concurrent.futures.Future] = {}
        for i, rec in enumerate(records):
            if rec is None:
                out[i] = filler_row("", width)
                continue
            outcome = resolver.resolve(task, rec)
            if isinstance(outcome, Done):
                out[i] = self._convert(lambda r=outcome.result: r, row_of(i), width)
            elif isinstance(outcome, Failed):
                self.last_error = str(outcome.error)
                out[i] = error_row(outcome.error, width)
            elif isinstance(outcome, Pending):
                waiting[i] = outcome.ticket
        # the rows' disk reads, all of them at once and bounded together: a hit read by then is the cell's
        # value now (a reopened workbook: no placeholder, no recalculation), the rest wait on the engine
        reads = [t.read for t in waiting.values() if isinstance(t, Ticket) and t.read is not None]
        if reads:
            wait = getattr(self._reads, "wait", READ_WAIT_S)
            if wait > 0:
                concurrent.futures.wait(reads, timeout=wait)
            for i, ticket in list(waiting.items()):
                if ticket.done():
                    out[i] = self._convert(ticket.result, row_of(i), width)
                    del waiting[i]
        if waiting and caller is not None and self.told is not None:
            base = list(out)

            def value() -> Any:
                """The call's value once every ticket it waits on has settled."""
                rows = list(base)
                for i, ticket in waiting.items():
                    rows[i] = self._convert(ticket.result, row_of(i), width)
                return rows if shape is None else shape(rows)

            for i in waiting:
                out[i] = filler_row(PENDING, width)
            # the call waits in the fate table; its door is told by the call's future once all its tickets
            # have settled
            tickets = list(waiting.values())
            settled = resolver.fates.watch(caller_key(caller), tickets, Answered(caller, value, tuple(tickets)))
            if settled is not None:
                settled.add_done_callback(self.told)
            pacer = getattr(self._reads, "pacer", None)
            if pacer is not None:  # a call made after its cell shows pending: it may wait its turn (``later``)
                pacer.add(tickets)
        elif waiting:  # outside Excel (a script, a test): wait for the answers, within the timeout
            timeout = resolver.batcher.request_timeout
            done, _ = concurrent.futures.wait(waiting.values(), timeout=timeout)
            for i, fut in waiting.items():
                if fut in done:
                    out[i] = self._convert(fut.result, row_of(i), width)
                else:
                    out[i] = error_row(EngineStalled(f"no answer within {timeout:g}s"), width)
        return out if shape is None else shape(out)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def reads_within(self, seconds: float) -> Iterator[None]:
        """Calls made inside this block on this thread wait at most ``seconds`` for their disk reads
        (``READ_WAIT_S`` at most; 0: not at all, a read that hits then settles the call as the engine's
        answer would): a door answering many calls in one request gives each what is left of its time."""
        before = getattr(self._reads, "wait", None)  # an enclosing block's bound, else none (READ_WAIT_S)
        self._reads.wait = max(0.0, min(seconds, READ_WAIT_S if before is None else before))
        try:
            yield
        finally:
            if before is None:
                del self._reads.wait
            else:
                self._reads.wait = before

    def started_within(self, seconds: float) -> bool:
        """Whether the engine has started within ``seconds`` (its start begun if it had not been; a failed
        start counts as started: each call then has its error at once)."""
        try:
            self.batcher.starting().result(max(0.0, seconds))
        except concurrent.futures.TimeoutError:
            return False
        except XladdinError:
            pass
        return True

    @contextlib.contextmanager
    def later(self) -> Iterator[None]:
        """Calls made inside this block on this thread are the calls of cells that already show pending
        (the cell service runs them after their POST has answered). So the block first waits for the
        engine's start, as a table does (a failed start is each call's error, kept for its time): each
        request is then prepared here and goes on as it is made. And a call does not wait for its disk
        reads (``reads_within(0)``): the reads of the calls go to the disk thread together instead of one
        call's at a time. And its calls are paced (``resolver.Pacer``): no more unanswered than the engine's
        window and ``ROWS_AHEAD``."""
        with self._lock:
            batcher = self._batcher
        if batcher is not None:
            try:
                batcher.start()
            except XladdinError:
                pass  # each call's outcome says why
        before = getattr(self._reads, "pacer", None)
        self._reads.pacer = self._pacer(batcher) if batcher is not None else None
        try:
            with self.reads_within(0):
                yield
        finally:
            self._reads.pacer = before

    def _pacer(self, batcher: Batcher) -> Pacer:
        """The one pace of the calls run later on this runtime's batcher, whatever block or thread runs them."""
        with self._lock:
            if self._paced is None or self._paced.batcher is not batcher:
                self._paced = Pacer(batcher)
            return self._paced

    def _convert(self, produce: Callable[[], Any], to_row: Callable[[Any], list[Any]], width: int) -> list[Any]:
        """``to_row`` of the produced result; a failure is the row's error."""
        try:
            return to_row(produce())
        except XladdinError as e:
            self.last_error = str(e)
            return error_row(e, width)
        except Exception as e:  # never raise into Excel
            self.last_error = f"internal error: {e}"
            return error_row(e, width)

    def close(self, *, abort: bool = False) -> None:
        with self._lock:
            batcher, self._batcher, self._resolver = self._batcher, None, None
        if batcher is not None:  # closed without the lock: its last callbacks take it
            batcher.close(abort=abort)
