"""Excel worksheet functions (xlwings UDFs). Thin: convert arguments, call a
task through the process-wide runtime, return cell values. Every failure is a
cell value starting ``#QWEN!``; nothing raises into Excel.

The only COM-specific code is here too: recalculating a cell whose answers have arrived (``recalculate``),
and reading the calling workbook's folder and Rules sheet (``book_folder``, ``book_rules``). On Windows
with desktop Excel, inside the xlwings COM server, ``caller`` is the xlwings ``ComRange`` the UDF
received; rewriting its formula on xlwings' COM event loop makes Excel call the UDF again (now a cache
hit). ``ComRange`` retries with backoff while Excel is busy (RPC_E_SERVERCALL_RETRYLATER).

In xlwings.conf (or the add-in settings) set ``UDF Modules`` to
``xladdin.excel.udfs`` and click Import Functions. ``caller`` is filled in by
xlwings and does not appear in Excel.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import sys
from pathlib import Path
from typing import Any

import xlwings as xw

from ..sheet import functions
from ..sheet.functions import RULES_ADDRESS, RULES_SHEET, CellRuntime

log = logging.getLogger(__name__)
_dynamic_arrays: dict[int, bool] = {}  # Excel process id → has dynamic arrays (Formula2)


def available() -> bool:
    """True inside xlwings' COM server on Windows. Checked by platform first: importing
    ``xlwings.com_server`` elsewhere changes the process's working directory."""
    if sys.platform != "win32":
        return False
    try:
        from xlwings import com_server  # noqa: F401
    except Exception:
        return False
    return True


def has_dynamic_arrays(caller: Any) -> bool:
    """Whether the caller's Excel has dynamic arrays (asked once per Excel process, on the COM thread)."""
    from xlwings.udfs import has_dynamic_array

    pid = caller.sheet.book.app.pid
    if pid not in _dynamic_arrays:
        _dynamic_arrays[pid] = has_dynamic_array(pid)
    return _dynamic_arrays[pid]


async def _rewrite(caller: Any) -> None:
    # Decided up front, as xlwings' own async UDFs do: on an Excel without Formula2, xlwings
    # retries the missing property instead of failing, so a fallback on error would never run.
    if has_dynamic_arrays(caller):
        await caller.set_formula2(await caller.get_formula2())
    else:
        await caller.set_formula(await caller.get_formula())


def rewrite(caller: Any) -> None:
    """Schedule the recalculation of ``caller`` on the COM loop (returns at once)."""
    from xlwings import com_server

    future = asyncio.run_coroutine_threadsafe(_rewrite(caller), com_server.loop)
    future.add_done_callback(lambda f: f.exception() and log.warning("rewrite failed: %s", f.exception()))


def recalculate(settled: concurrent.futures.Future) -> None:
    """The cells' runtime's ``told`` (run by a waiting cell's future once its answers are in): the cell's
    recalculation scheduled (``rewrite``); a failure to schedule it is logged, the cell keeps its placeholder
    until the next recalculation."""
    caller = settled.result().caller
    try:
        rewrite(caller)
    except Exception as e:
        log.warning("cannot recalculate %s: %s", getattr(caller, "address", caller), e)


_rules_memo: dict[str, tuple[float, Any]] = {}


def book_folder(caller: Any) -> Path | None:
    """The folder of the calling workbook (a report file's relative path is taken from it), or None
    for a workbook not yet saved."""
    try:
        full = Path(str(caller.sheet.book.fullname))
    except Exception:
        return None
    return full.parent if full.is_absolute() else None


def book_rules(caller: Any, ttl: float = 2.0) -> Any:
    """Values of the calling workbook's Rules sheet (key/value rows), or None without one.

    Read on the COM thread the UDF runs on; remembered for ``ttl`` seconds so a
    recalculation of 500 rows reads the sheet once."""
    import time

    try:
        book = caller.sheet.book
        name = book.name
    except Exception:
        return None
    now = time.monotonic()
    hit = _rules_memo.get(name)
    if hit is not None and now - hit[0] < ttl:
        return hit[1]
    try:
        sheets = [s.name for s in book.sheets]
        values = book.sheets[RULES_SHEET].range(RULES_ADDRESS).value if RULES_SHEET in sheets else None
    except Exception as e:  # a busy or closing workbook: default rules this time
        log.debug("rules sheet: %s", e)
        values = None
    _rules_memo[name] = (now, values)
    return values


_runtime: CellRuntime | None = None
# How xlwings converts each argument (``@xw.arg`` options): declared once, applied below, and
# replayed through xlwings' own conversion pipeline by the tests.
ARG_OPTIONS: dict[str, dict[str, dict[str, Any]]] = {
    "QWEN_SCREEN": {"values": {"ndim": 2}, "rules": {"ndim": 2}},
    "QWEN": {"context": {"ndim": 2}},
    "QWEN_CLASSIFY": {"labels": {"ndim": 1}},
}


def _args(fn):
    for name, options in reversed(ARG_OPTIONS.get(fn.__name__, {}).items()):
        fn = xw.arg(name, **options)(fn)
    return fn


def runtime() -> CellRuntime:
    """The process-wide runtime every UDF shares (created on first use, closed at exit)."""
    global _runtime
    if _runtime is None:
        _runtime = CellRuntime(told=recalculate if available() else None)
        atexit.register(_close_at_exit)
    return _runtime


def _close_at_exit() -> None:
    if _runtime is not None:
        _runtime.close(abort=True)  # do not wait for unanswered requests; answered ones are cached


def set_runtime(rt: CellRuntime | None) -> None:
    global _runtime
    if _runtime is not None and _runtime is not rt:
        _runtime.close()
    _runtime = rt


@xw.func
@_args
def QWEN_SCREEN(values, header=False, rules=None, caller=None):
    """Screen one row (代码 名称 行业 市盈率TTM ROE 每股收益 财报摘要 …) or a table with its header row
    (header=TRUE). Spills risk level, score, reason, flags, figures. rules: a key/value range; without it
    the workbook's Rules sheet is read when there is one."""
    folder = book_folder(caller) if caller is not None else None
    if rules is None and caller is not None:
        rules = book_rules(caller)  # the workbook's Rules sheet, when it has one
    return functions.call(runtime(), "QWEN_SCREEN", (values, header, rules), caller, folder)


@xw.func
@_args
def QWEN(prompt, context=None, caller=None):
    """Ask the local model; context: cells whose text is given with the question."""
    return functions.call(runtime(), "QWEN", (prompt, context), caller)


@xw.func
def QWEN_EXTRACT(text, item, unit="亿元", caller=None):
    """A figure from report text as a number in unit (default 亿元; 元 万元 百万元 % 元/股 …)."""
    return functions.call(runtime(), "QWEN_EXTRACT", (text, item, unit), caller)


@xw.func
@_args
def QWEN_CLASSIFY(text, labels, caller=None):
    """One of labels (a range or a comma-separated text) for text."""
    return functions.call(runtime(), "QWEN_CLASSIFY", (text, labels), caller)


@xw.func
def QWEN_HIGHLIGHTS(report, points=None, max_chars=None, caller=None):
    """Numbered results highlights of a report (its text, or a .pdf/.txt/.md/.html path), every number
    checked against the figures code read and the source; points: how many (default 3), max_chars: per
    highlight (default 60). A highlight with an unverified number is left out (QWEN_STATUS, the CLI's
    report say how many)."""
    folder = book_folder(caller) if caller is not None else None
    return functions.call(runtime(), "QWEN_HIGHLIGHTS", (report, points, max_chars), caller, folder)


@xw.func
def QWEN_STATUS():
    """Engine, model, queue, cache entries and hit rate, last error — as a two-column table."""
    return functions.call(runtime(), "QWEN_STATUS", ())
