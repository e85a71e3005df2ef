"""The worksheet functions of every grid, in one table (``FUNCTIONS``: each one's name, help, arguments,
result shape and body), and the one entry every door calls them through (``call``): Excel (``excel/udfs.py``,
through xlwings), LibreOffice Calc (``xladdin.calc``) and the cell service (Excel for Mac and the web, WPS).
Arguments as the spreadsheet gives them in, cell values out, through one process-wide ``CellRuntime``. What
differs between the doors stays with them: where the workbook's folder and Rules sheet come from, and how a
waiting cell is recalculated.

Below, in the order a call goes: the cell values (a range read into rows, a result into its spill row,
an error into a value of the same shape), the cells' runtime every door shares (``CellRuntime``: a
waiting call and its future), and the function table.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime as dt
import functools
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .. import collector
from ..core import Batcher, Done, Failed, Pacer, Pending, Resolver
from ..errors import ERROR_PREFIX, EngineStalled, InputError, XladdinError, error_text, first_error
from ..reading.documents import FIELD, ReportPath, Reports
from ..reading.pool import Pool, pool_from_frame, pool_from_table
from ..settings import Settings
from ..tasks import AskTask, ClassifyTask, ExtractTask, HighlightsTask, ScreenTask
from ..tasks.base import Task
from ..tasks.rules import DEFAULT_RULES, Rules
from ..tasks.screen import ScreenResult, date_rows

# Cell values: pure conversions between spreadsheet values and task inputs/outputs.
#
# Excel (through xlwings' converters) hands us scalars, 1-D lists, 2-D lists
# with ``None`` for blanks, or numpy arrays. Results go back as 2-D lists whose
# shape never depends on success or failure, so a spill never jumps around.

# Column order of a row passed without a header: 代码 名称 行业 市盈率TTM ROE 每股收益 财报摘要 (then optional)
POSITIONAL = ("code", "name", "industry", "pe_ttm", "roe", "eps", "report_text",
              "net_profit", "net_profit_prev", "revenue", "st")
SPILL_FIELDS = tuple(n for n in ScreenResult.model_fields if n != "provenance")
PENDING = "#QWEN… 计算中 pending"
RULES_SHEET = "Rules"
RULES_ADDRESS = "A2:B20"  # the one Rules range: QWEN_SCREEN without a rules argument, the template and Refresh
RULES_REF = f"{RULES_SHEET}!" + ":".join("$" + c[0] + "$" + c[1:] for c in RULES_ADDRESS.split(":"))


def to_rows(value: Any) -> list[list[Any]]:
    """Any Excel argument as a 2-D list (a 1-D range is one row)."""
    if hasattr(value, "tolist"):  # numpy array
        value = value.tolist()
    if not isinstance(value, list | tuple):
        return [[value]]
    if not value:
        return []
    if not isinstance(value[0], list | tuple):
        return [list(value)]
    return [list(r) for r in value]


def table_frame(rows: list[list[Any]]) -> Any:
    """A range with its header row as a DataFrame through xlwings' own DataFrame converter — the
    frame ``xladdin.screen(df)`` takes — or ``None`` without pandas (the rows are read as they are)."""
    try:
        from xlwings.conversion.pandas_conv import PandasDataFrameConverter
    except ImportError:  # pandas is optional
        return None
    return PandasDataFrameConverter.read_value(rows, {"index": False, "header": True})


def _blank(row: list[Any]) -> bool:
    return all(v is None or (isinstance(v, str) and not v.strip()) for v in row)


def screen_records(value: Any, header: bool) -> tuple[list[dict[str, Any] | None], list[str] | None]:
    """Task input dicts (``None`` for a blank row, kept so the spill lines up) and the header if any."""
    records, pool = screen_table(value, header)
    return records, pool.columns if header else None


def screen_table(value: Any, header: bool) -> tuple[list[dict[str, Any] | None], Pool]:
    """``screen_records``'s dicts and the range as a pool, one row per record (a row without a header has
    the ``POSITIONAL`` columns: no 公告日期 / 报告期), for ``screen.date_rows``."""
    rows = to_rows(value)
    if header:
        if not rows:
            raise InputError("header", "row is missing")
        frame = table_frame(rows)
        if frame is not None:
            pool = pool_from_frame(frame, "range")
        else:
            pool = pool_from_table(rows[0], rows[1:], Path("range"))
        records = pool.records()
        return [None if _blank(r) else rec for r, rec in zip(rows[1:], records, strict=True)], pool
    out: list[dict[str, Any] | None] = []
    for row in rows:
        if len(row) > len(POSITIONAL):
            raise InputError("range", f"has {len(row)} columns; without a header at most {len(POSITIONAL)} "
                             f"({'/'.join(POSITIONAL[:7])}…)")
        out.append(None if _blank(row) else dict(zip(POSITIONAL, row, strict=False)))
    return out, Pool(Path("range"), list(POSITIONAL), rows, {name: i for i, name in enumerate(POSITIONAL)})


def result_row(res: ScreenResult) -> list[Any]:
    """The spill: the result's own cells up to its provenance, blanks for missing values."""
    return ["" if v is None else v for v in res.cells()[: len(SPILL_FIELDS)]]


def filler_row(first: str, width: int = len(SPILL_FIELDS)) -> list[Any]:
    return [first] + [""] * (width - 1)


def error_value(err: BaseException) -> str:
    msg = error_text(err) if isinstance(err, XladdinError) else f"{ERROR_PREFIX} internal error: {err}"
    return msg[:255]


def error_row(err: BaseException, width: int = len(SPILL_FIELDS)) -> list[Any]:
    return filler_row(error_value(err), width)


def spill_header() -> list[str]:
    return ScreenResult.headers()[: len(SPILL_FIELDS)]


def rules_from_range(value: Any) -> Rules:
    """A Rules sheet range: rows of (key, value[, description]); a header row and blanks are skipped."""
    if value is None:
        return DEFAULT_RULES
    data: dict[str, Any] = {}
    for row in to_rows(value):
        if len(row) < 2 or row[0] is None or row[1] is None:
            continue
        key = str(row[0]).strip()
        if key.lower() in ("key", "参数", "name"):
            continue
        if key not in Rules.model_fields:
            raise InputError("rules", f"unknown key {key!r} (known: {', '.join(Rules.model_fields)})")
        data[key] = row[1]
    try:
        return Rules.model_validate(data)
    except ValidationError as e:
        raise InputError("rules", first_error(e)) from None


def rules_rows(rules: Rules = DEFAULT_RULES) -> list[list[Any]]:
    """Rows for a Rules sheet: key, value, description."""
    return [[name, getattr(rules, name), f.title or ""] for name, f in Rules.model_fields.items()]


# The cells' runtime (``CellRuntime``): pending-cell batching, what every door shares.
#
# Desktop Excel calls a UDF once per cell. xlwings' ``async_mode="threading"``
# parks every pending call on a thread of a pool of min(32, cores+4) threads, so
# a sheet of 500 rows reaches the model in batches of at most that size. We do
# not park threads:
#
# 1. A UDF call asks the process-wide ``Resolver`` (``xladdin.core.resolver``) for each
#    of its rows and gets an outcome at once: ``Done`` (from memory, or the cache read
#    on the batcher's disk thread within ``READ_WAIT_S`` — no placeholder, no
#    recalculation: a reopened workbook's values at once), ``Failed`` (a bad field,
#    or a request that failed within ``ERROR_TTL`` seconds: a down engine is not
#    asked again in a loop) or ``Pending`` (the request joined the engine queue, or
#    a request in flight, or its disk read took longer than the bound: a slow or
#    locked disk).
# 2. A pending row shows a placeholder of the same shape as its result
#    (``#QWEN… pending``).
# 3. When every pending request of that cell has settled (each answer goes to the
#    cache the moment it arrives), the call's future (``Fates.watch``) runs the
#    door's own ``told`` — on Windows ``xladdin.excel.udfs.recalculate``, which
#    rewrites the cell's formula on xlwings' COM loop with its retry on a busy
#    Excel. The UDF runs again: its rows are now ``Done`` or ``Failed``.
#
# The runtime only turns outcomes into cell values and tells the door when a waiting call's are in.
#
# So 500 filled-down rows become one queue that the batcher feeds to the
# engine at its full parallelism, however few threads Excel has. Outside Excel
# (``caller`` is None, e.g. tests, scripts, or no COM) a call waits for its
# answers instead, up to the request timeout.

# A door told that a waiting call's answers are in: its own function, a done-callback of the call's future
# (``Fates.watch``) run by that future where the call's last fate settled; the future's result is the call's
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
    """A waiting call all of whose fates have settled: the call as its door passed it (``caller``), and its
    cell value made from the fates' outcomes by the code that made its placeholder (``value``)."""

    caller: Any
    value: Callable[[], Any]
    fates: tuple[concurrent.futures.Future, ...]
    again: bool = False  # what the call waited for was not its answers (report files read): run it again

    @property
    def made(self) -> Callable[[], Any] | None:
        """``value``, or ``None`` when a fate was cancelled (its request is asked again) or the call waited for
        what it needs before it asks (``again``): run the call again."""
        return None if self.again or any(t.cancelled() for t in self.fates) else self.value


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

    def reading(self, paths: Sequence[ReportPath], caller: Any) -> list[list[Any]] | None:
        """Under ``as_of``, a call whose report files are not all read yet: their reads begun (off this
        thread), the call watched on them and pending (``None``: all read, or a call no door is told of, which
        waits for them in ``read_text``). A cell's thread never waits for a file to be read."""
        if self.as_of is None or caller is None or self.told is None or not paths:
            return None
        reader = self.batcher.reader
        out: list[concurrent.futures.Future] = []
        for path in paths:
            try:
                _, text = reader.text(path)
            except XladdinError:  # the row's own reading says why
                continue
            if not isinstance(text, str) and not text.done():
                out.append(text)
        if not out:
            return None
        settled = self.resolver.fates.watch(caller_key(caller), out, Answered(caller, lambda: None, (), again=True))
        if settled is not None:
            settled.add_done_callback(self.told)
        self._reads.waited = True
        return [filler_row(PENDING)]

    def waited(self) -> bool:
        """Whether the last call made on this thread waits on futures its door is told of (its fates, or its
        report files' reads): what a door that keeps calls (Calc, the cell service) takes for pending, never a
        look at the value's text."""
        return getattr(self._reads, "waited", False)

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
        the engine is watched (``Fates.watch``): once its fates have settled, the call's future runs the
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
                waiting[i] = outcome.fate
        # the rows' disk reads, all of them at once and bounded together: a hit read by then is the cell's
        # value now (a reopened workbook: no placeholder, no recalculation), the rest wait on the engine
        if waiting:
            wait = getattr(self._reads, "wait", READ_WAIT_S)
            if wait > 0:
                resolver.fates.wait_looked(waiting.values(), wait)
            for i, fate in list(waiting.items()):
                if fate.done():
                    out[i] = self._convert(fate.result, row_of(i), width)
                    del waiting[i]
        if waiting and caller is not None and self.told is not None:
            base = list(out)

            def value() -> Any:
                """The call's value once every fate it waits on has settled."""
                rows = list(base)
                for i, fate in waiting.items():
                    rows[i] = self._convert(fate.result, row_of(i), width)
                return rows if shape is None else shape(rows)

            for i in waiting:
                out[i] = filler_row(PENDING, width)
            self._reads.waited = True
            # the call waits in the fate table; its door is told by the call's future once all its fates
            # have settled
            fates = list(waiting.values())
            settled = resolver.fates.watch(caller_key(caller), fates, Answered(caller, value, tuple(fates)))
            if settled is not None:
                settled.add_done_callback(self.told)
            pacer = getattr(self._reads, "pacer", None)
            if pacer is not None:  # a call made after its cell shows pending: it may wait its turn (``later``)
                pacer.add(fates)
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


# The function table and the one entry every door calls it through.

STATUS_WIDTH, STATUS_ROWS = 2, 13  # QWEN_STATUS's table


def call(rt: CellRuntime, name: str, args: Sequence[Any], caller: Any = None, folder: Path | None = None) -> Any:
    """The one entry of every door: function ``name`` of the table (``FUNCTIONS``) with its arguments in the
    table's order (``caller``: what a waiting call is known by; ``folder``: the workbook's, a report file's
    relative path is taken from it). Any failure is a ``#QWEN!`` value of the function's usual shape, and
    the runtime's last error."""
    rt._reads.waited = False
    try:
        return BY_NAME[name].body(rt, args, caller, folder)
    except Exception as e:
        return failed(rt, name, e)


def settled(rt: CellRuntime, name: str, value: Callable[[], Any]) -> Any:
    """A waiting call's value made from its answers (``Answered.made``), guarded as ``call``."""
    try:
        return value()
    except Exception as e:
        return failed(rt, name, e)


def failed(rt: CellRuntime, name: str, error: Exception) -> Any:
    """``error`` as function ``name``'s value: a ``#QWEN!`` value of its usual shape (the runtime's last error)."""
    rt.last_error = str(error)
    width = BY_NAME[name].width
    value = error_value(error)
    return [filler_row(value, width)] if width > 1 else value


def _single(rows: list[list[Any]]) -> Any:
    return rows[0][0]


def screen(rt: CellRuntime, values: Any, header: bool, rules: Any, caller: Any = None,
           folder: Path | None = None) -> list[list[Any]]:
    """One row, or a table with its header row: the spill rows (with the spill's header for a table),
    each dated as the CLI's (报告期, 公告日) and, under the ``as_of`` setting, as of that day (``as_of``)."""
    records, pool = screen_table(values, bool(header))
    reports = rt.reports(folder)  # a report file's relative path: from the workbook's folder
    placed = [reports.place(r, folder) for r in records]
    reading = rt.reading([r[FIELD] for r in placed if isinstance(r, dict) and isinstance(r.get(FIELD), ReportPath)],
                         caller)
    if reading is not None:  # as of a day: its files' dates read first, off this thread
        width = len(SPILL_FIELDS)
        rows = [filler_row(PENDING if r is not None else "", width) for r in records]
        return [spill_header(), *rows] if header else rows
    records, dating = date_rows(pool, placed, rt.as_of, rt.read_text, rt.settings.undated_reports)
    task = ScreenTask(rules=rules_from_range(rules), max_text_chars=rt.max_text_chars)
    width = len(SPILL_FIELDS)
    sent = [None if i in dating.refused else r for i, r in enumerate(records)]  # a refused row asks nothing

    def spill(rows: list[list[Any]]) -> list[list[Any]]:
        for i, error in dating.refused.items():  # published after the day: the row's error, as the CLI's
            rows[i] = error_row(error, width)
        return [spill_header(), *rows] if header else rows

    return rt.rows(task, sent, result_row, width, caller, dating.result, spill)


def ask(rt: CellRuntime, prompt: Any, context: Any, caller: Any = None) -> Any:
    flat = [v for row in to_rows(context) for v in row] if context is not None else []
    return rt.rows(AskTask(), [{"prompt": prompt, "context": flat}], lambda r: [r.answer], 1, caller, shape=_single)


def extract(rt: CellRuntime, text: Any, item: Any, unit: Any, caller: Any = None) -> Any:
    record = {"text": text, "item": item, "unit": unit if unit not in (None, "") else "亿元"}

    def to_row(r):
        return [f"{ERROR_PREFIX} {r.note}"] if r.value is None else [r.value]

    return rt.rows(ExtractTask(), [record], to_row, 1, caller, shape=_single)


def classify(rt: CellRuntime, text: Any, labels: Any, caller: Any = None) -> Any:
    record = {"text": text, "labels": labels}
    return rt.rows(ClassifyTask(), [record], lambda r: [r.label], 1, caller, shape=_single)


def highlights(rt: CellRuntime, report: Any, points: Any, max_chars: Any, caller: Any = None,
               folder: Path | None = None) -> Any:
    record = rt.reports(folder).place({"report_text": report, "max_chars": max_chars}, folder)
    return rt.rows(HighlightsTask(points), [record], lambda r: [r.highlights or f"{ERROR_PREFIX} {r.notes}"], 1,
                   caller, shape=_single)


def status(rt: CellRuntime) -> list[list[Any]]:
    """Engine, model, queue, cache entries and hit rate, last error — as a two-column table."""
    try:
        b = rt.batcher
    except XladdinError as e:
        return [["engine", error_value(e)], ["last error", str(e)]]
    snap = b.snapshot()
    cache = b.cache.stats()
    # per request, once: answered from memory or the disk cache, joined to the same request in flight,
    # or asked of the engine (each call the engine got)
    from_cache = rt.resolver.memo_hits + snap["cache_hits"]
    joined, asked = snap["deduplicated"], snap["engine_requests"]
    rate = round(from_cache / (from_cache + asked), 4) if from_cache + asked else ""
    model = snap["model"] or ""
    starter = b.learned.starter  # run here, or by a server that names it by its file
    return [
        ["engine", b.engine.describe()],
        ["model", snap["model"]],
        ["starter model", "yes — weak: configure a Qwen model for real work" if starter else
         "no" if model else "not known until the engine starts"],
        ["queue", snap["queued"]],
        ["in flight", snap["in_flight"]],
        ["pending cells", rt.pending_cells],
        ["requests", from_cache + joined + asked],
        ["asked of the engine", asked],
        ["joined one in flight", joined],
        ["cache entries", cache["entries"]],
        ["cache hit rate", rate],
        ["cache", cache["directory"] if cache["enabled"] else (b.cache.warning or "off")],
        ["last error", rt.last_error or snap["last_error"] or ""],
    ]


def flag(value: Any) -> bool:
    """A TRUE/FALSE argument as a grid gives it (TRUE, 1, "TRUE"; FALSE, 0, "FALSE", empty)."""
    return bool(value) and str(value).strip().upper() not in ("0", "FALSE", "0.0")


Body = Callable[[CellRuntime, Sequence[Any], Any, Path | None], Any]
NAMESPACE = "XLADDIN"  # Office and WPS put custom functions in a namespace: =XLADDIN.QWEN_SCREEN(A2:G2)


@dataclass(frozen=True)
class Param:
    name: str
    help: str
    shape: str = "value"  # "range": a 2-D range; "list": a 1-D list (a range or one text); "value": one value
    optional: bool = True
    default: Any = None  # the default the UDF declares (None: left out)


@dataclass(frozen=True)
class Function:
    name: str  # what the user types, as in Excel
    method: str  # the UNO method
    help: str
    params: tuple[Param, ...]
    spill: bool = False  # the result is a 2-D array (a spill in Excel, an array formula in Calc)
    volatile: bool = False  # recalculated whenever the sheet is (its value changes without its arguments)
    width: int = 1  # the result's columns (1: one value)
    rows: int = 1  # the result's rows, a spill's first call (Calc's array formula)
    # its body: called with the runtime, its arguments in the table's order, its caller and the workbook's folder
    body: Body = field(kw_only=True, repr=False, compare=False)


# The one function table of every grid: each function's name, help, arguments, result shape and body. Every
# door calls through ``call``; the Excel UDFs' arguments are checked against it by a test, Calc's UNO
# interface and help (``calc/build.py``), the Office add-in's ``functions.json`` and WPS's declarations
# (``metadata``) and the functions' reference page (``docs/generate.py``) are made from it.
FUNCTIONS = (
    Function("QWEN_SCREEN", "qwenScreen", "Screen one row (代码 名称 行业 市盈率TTM ROE 每股收益 财报摘要 …) or a "
             "table with its header row: risk level, score, reason, flags, figures. Enter it as an array formula "
             "as wide as its result.",
             (Param("values", "the row, or the table with its header row", "range", optional=False),
              Param("header", "TRUE: the first row is the header (default FALSE)", default=False),
              Param("rules", "a key/value range of rule thresholds (e.g. Rules.$A$2:$B$20)", "range")),
             spill=True, width=len(SPILL_FIELDS),
             body=lambda rt, a, caller, folder: screen(rt, a[0], flag(a[1]), a[2], caller, folder)),
    Function("QWEN", "qwen", "Ask the local model.",
             (Param("prompt", "the question", optional=False),
              Param("context", "cells whose text is given with it", "range")),
             body=lambda rt, a, caller, folder: ask(rt, a[0], a[1], caller)),
    Function("QWEN_EXTRACT", "qwenExtract", "A figure from report text as a number in a unit.",
             (Param("text", "report text", optional=False), Param("item", "the figure, e.g. 营业收入", optional=False),
              Param("unit", "亿元 (default), 元, 万元, 百万元, %, 元/股 …", default="亿元")),
             body=lambda rt, a, caller, folder: extract(rt, a[0], a[1], a[2], caller)),
    Function("QWEN_CLASSIFY", "qwenClassify", "One of the labels for a text.",
             (Param("text", "the text", optional=False),
              Param("labels", "a range or a comma-separated text", "list", optional=False)),
             body=lambda rt, a, caller, folder: classify(rt, a[0], a[1], caller)),
    Function("QWEN_HIGHLIGHTS", "qwenHighlights", "Numbered results highlights of a report, every number checked.",
             (Param("report", "report text or a .pdf/.txt/.md/.html path", optional=False),
              Param("points", "how many (default 3)"), Param("max_chars", "characters per highlight (60)")),
             body=lambda rt, a, caller, folder: highlights(rt, a[0], a[1], a[2], caller, folder)),
    Function("QWEN_STATUS", "qwenStatus", "Engine, model, queue, cache and last error as a two-column table. "
             "Enter it as an array formula two columns wide.", (), spill=True, volatile=True,
             width=STATUS_WIDTH, rows=STATUS_ROWS, body=lambda rt, a, caller, folder: status(rt)),
)
BY_NAME = {f.name: f for f in FUNCTIONS}


def metadata() -> dict[str, Any]:
    """``functions.json`` of the Office add-in (custom functions metadata; WPS reads the same form)."""
    out = []
    for f in FUNCTIONS:
        entry: dict[str, Any] = {
            "id": f.name, "name": f.name, "description": f.help,
            "result": {"type": "any", "dimensionality": "matrix" if f.spill else "scalar"},
            "parameters": [{"name": p.name, "description": p.help, "type": "any",
                            "dimensionality": "scalar" if p.shape == "value" else "matrix",
                            "optional": p.optional} for p in f.params],
        }
        if f.volatile:
            entry["options"] = {"volatile": True}
        out.append(entry)
    return {"functions": out}
