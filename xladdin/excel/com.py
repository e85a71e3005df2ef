"""The only COM-specific code: recalculating a cell whose answers have arrived (``recalculate``).

Runs on Windows with desktop Excel, inside the xlwings COM server. ``caller``
is the xlwings ``ComRange`` the UDF received; rewriting its formula on xlwings'
COM event loop makes Excel call the UDF again (now a cache hit). ``ComRange``
retries with backoff while Excel is busy (RPC_E_SERVERCALL_RETRYLATER).
Status-bar text for the Refresh macro lives here too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sys
from pathlib import Path
from typing import Any

from ..sheet.cells import RULES_ADDRESS, RULES_SHEET

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


def status_bar(app: Any, text: str | bool) -> None:
    """Excel's status bar text (``False`` gives it back to Excel)."""
    try:
        app.status_bar = text
    except Exception as e:  # a busy Excel must not fail the refresh
        log.debug("status bar: %s", e)


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
