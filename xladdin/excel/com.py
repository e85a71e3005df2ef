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
