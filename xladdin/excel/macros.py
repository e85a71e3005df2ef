"""The Refresh macro: screen the whole Pool table as one batch, then recalculate.

Call it from a button or the xlwings ribbon: ``RunPython "import
xladdin.excel.macros as m; m.refresh()"``, or "Run main" with
``workbook_templates/stock_screen.py`` beside the workbook. It fills the cache
through the same batcher and task as the CLI, so afterwards every
``QWEN_SCREEN`` formula is an instant cache hit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import XladdinError
from ..reading.pool import is_empty_row, pool_from_table
from ..sheet import functions
from ..tasks import ScreenTask
from ..tasks.screen import date_rows

log = logging.getLogger(__name__)

POOL_SHEET = "Pool"
RULES_REF = functions.RULES_REF
POOL_COLUMNS = (
    "代码",
    "名称",
    "行业",
    "市盈率TTM",
    "ROE(%)",
    "每股收益",
    "财报摘要",
    "净利润(亿元)",
    "上年净利润(亿元)",
    "营业收入(亿元)",
)  # functions.POSITIONAL order
LAST_INPUT_COL = "J"
VERDICT_COL = "L"


def verdict_formula(row: int) -> str:
    """The per-row formula of the Pool sheet (cell references only)."""
    return f"=QWEN_SCREEN(A{row}:{LAST_INPUT_COL}{row},FALSE,{RULES_REF})"


def refresh_values(table: list[list[Any]], rules: Any = None, progress: Callable[[str], None] | None = None,
                   runtime: Any = None, folder: Path | None = None) -> dict[str, int]:
    """Screen a table (header row first) through the shared batcher; returns counts. ``folder``: the
    workbook's, where its report files are read from."""
    from .udfs import runtime as shared_runtime

    rt = runtime or shared_runtime()
    pool = pool_from_table(table[0], table[1:], Path(POOL_SHEET))
    reports = rt.reports(folder)
    # as the formulas will ask: under the as_of setting without a report published after the day
    placed, dating = date_rows(pool, [reports.place(rec, folder) for rec in pool.records()], rt.as_of, rt.read_text)
    records = [rec for i, (row, rec) in enumerate(zip(pool.rows, placed, strict=True))
               if not is_empty_row(row) and i not in dating.refused]
    task = ScreenTask(rules=functions.rules_from_range(rules), max_text_chars=rt.max_text_chars)
    counts = {"rows": len(records), "done": 0, "cached": 0, "errors": 0}

    def on_result(_: int, res: Any) -> None:
        counts["done"] += 1
        if isinstance(res, XladdinError):
            counts["errors"] += 1
        elif res.provenance.cached:
            counts["cached"] += 1
        if progress and (counts["done"] % 5 == 0 or counts["done"] == counts["rows"]):
            progress(f"xladdin: {counts['done']}/{counts['rows']} rows ({counts['cached']} cached, "
                     f"{counts['errors']} errors)")

    rt.resolver.map(task, records, on_result)
    return counts


def verdict_column(existing: Any, rows: int) -> list[list[str]]:
    """The verdict column's formulas for data rows 2..rows+1, as one 2-D block. A cell holding a
    formula of the user's own (not ``QWEN_SCREEN``) or a value keeps it; blanks and our formulas
    get the row's ``QWEN_SCREEN`` formula."""
    current = [r[0] if r else None for r in functions.to_rows(existing)] if rows > 1 else [existing]
    current += [None] * (rows - len(current))
    out = []
    for i, value in enumerate(current[:rows]):
        ours = value in (None, "") or (isinstance(value, str) and "QWEN_SCREEN(" in value.upper())
        out.append([verdict_formula(i + 2) if ours else value])
    return out


def refresh(book: Any = None) -> dict[str, int]:
    """xlwings entry point: read Pool (and Rules) from the calling workbook, screen, recalculate."""
    import xlwings as xw

    book = book or xw.Book.caller()
    sheet = book.sheets[POOL_SHEET]
    table = sheet.range("A1").expand().value
    names = [s.name for s in book.sheets]
    rules = (book.sheets[functions.RULES_SHEET].range(functions.RULES_ADDRESS).value
             if functions.RULES_SHEET in names else None)
    app = book.app
    calculation = app.calculation
    try:
        full = Path(str(book.fullname))
        counts = refresh_values(table, rules, progress=lambda text: status_bar(app, text),
                                folder=full.parent if full.is_absolute() else None)
        rows = len(table) - 1
        if rows > 0:
            # one write of the whole column, Excel not recalculating in between; then one recalculation,
            # in which every formula is a cache hit
            column = sheet.range(f"{VERDICT_COL}2:{VERDICT_COL}{rows + 1}")
            app.calculation = "manual"
            column.formula2 = verdict_column(column.formula2, rows)
        app.calculation = calculation
        app.calculate()
    finally:
        app.calculation = calculation
        status_bar(app, False)
    return counts


def status_bar(app: Any, text: str | bool) -> None:
    """Excel's status bar text (``False`` gives it back to Excel)."""
    try:
        app.status_bar = text
    except Exception as e:  # a busy Excel must not fail the refresh
        log.debug("status bar: %s", e)
