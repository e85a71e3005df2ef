"""The only COM-specific code: recalculating a cell whose answers have arrived.

Runs on Windows with desktop Excel, inside the xlwings COM server. ``caller``
is the xlwings ``ComRange`` the UDF received; rewriting its formula on xlwings'
COM event loop makes Excel call the UDF again (now a cache hit). ``ComRange``
retries with backoff while Excel is busy (RPC_E_SERVERCALL_RETRYLATER).
Status-bar text for the Refresh macro lives here too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)


def available() -> bool:
    try:
        from xlwings import com_server  # noqa: F401  (Windows only)
    except Exception:
        return False
    return True


async def _rewrite(caller: Any) -> None:
    try:
        formula = await caller.get_formula2()
        await caller.set_formula2(formula)
    except Exception:
        formula = await caller.get_formula()
        await caller.set_formula(formula)


def rewrite(caller: Any) -> None:
    """Schedule the recalculation of ``caller`` on the COM loop (returns at once)."""
    from xlwings import com_server

    future = asyncio.run_coroutine_threadsafe(_rewrite(caller), com_server.loop)
    future.add_done_callback(lambda f: f.exception() and log.warning("rewrite failed: %s", f.exception()))


def status_bar(app: Any, text: str | bool) -> None:
    """Excel's status bar text (``False`` gives it back to Excel)."""
    try:
        app.status_bar = text
    except Exception as e:  # a busy Excel must not fail the refresh
        log.debug("status bar: %s", e)


RULES_SHEET = "Rules"
RULES_ADDRESS = "A2:B20"
_rules_memo: dict[str, tuple[float, Any]] = {}


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
