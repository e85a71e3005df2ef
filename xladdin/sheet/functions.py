"""The worksheet functions' bodies, shared by Excel (``excel/udfs.py``, through xlwings) and LibreOffice
Calc (``xladdin.calc``): arguments as the spreadsheet gives them in, cell values out, through one
process-wide ``CellRuntime``. What differs between the two stays with them: where the workbook's
folder and Rules sheet come from, and how a waiting cell is recalculated."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import ERROR_PREFIX, XladdinError
from ..jobs.as_of import date_rows
from ..tasks import AskTask, ClassifyTask, ExtractTask, HighlightsTask, ScreenTask
from . import cells
from .pending import CellRuntime

STATUS_WIDTH, STATUS_ROWS = 2, 13  # QWEN_STATUS's table


def call(rt: CellRuntime, name: str, args: Sequence[Any], caller: Any = None, folder: Path | None = None) -> Any:
    """The one entry of every door: function ``name`` of ``TABLE`` with its arguments in the table's order
    (``caller``: what a waiting call is known by; ``folder``: the workbook's, a report file's relative path
    is taken from it). Any failure is a ``#QWEN!`` value of the function's usual shape, and the runtime's
    last error."""
    try:
        return TABLE[name][0](rt, args, caller, folder)
    except Exception as e:
        return failed(rt, name, e)


def settled(rt: CellRuntime, name: str, value: Callable[[], Any]) -> Any:
    """A waiting call's value made from its answers (``CellRuntime.rows``' ``settle``), guarded as ``call``."""
    try:
        return value()
    except Exception as e:
        return failed(rt, name, e)


def failed(rt: CellRuntime, name: str, error: Exception) -> Any:
    """``error`` as function ``name``'s value: a ``#QWEN!`` value of its usual shape (the runtime's last error)."""
    rt.last_error = str(error)
    width = TABLE[name][1]
    value = cells.error_value(error)
    return [cells.filler_row(value, width)] if width > 1 else value


def _single(rows: list[list[Any]]) -> Any:
    return rows[0][0]


def screen(rt: CellRuntime, values: Any, header: bool, rules: Any, caller: Any = None,
           folder: Path | None = None) -> list[list[Any]]:
    """One row, or a table with its header row: the spill rows (with the spill's header for a table),
    each dated as the CLI's (报告期, 公告日) and, under the ``as_of`` setting, as of that day (``as_of``)."""
    records, pool = cells.screen_table(values, bool(header))
    reports = rt.reports(folder)  # a report file's relative path: from the workbook's folder
    records, dating = date_rows(pool, [reports.place(r, folder) for r in records], rt.as_of, rt.read_text,
                              rt.settings.undated_reports)
    task = ScreenTask(rules=cells.rules_from_range(rules), max_text_chars=rt.max_text_chars)
    width = len(cells.SPILL_FIELDS)
    sent = [None if i in dating.refused else r for i, r in enumerate(records)]  # a refused row asks nothing

    def spill(rows: list[list[Any]]) -> list[list[Any]]:
        for i, error in dating.refused.items():  # published after the day: the row's error, as the CLI's
            rows[i] = cells.error_row(error, width)
        return [cells.spill_header(), *rows] if header else rows

    return rt.rows(task, sent, cells.result_row, width, caller, dating.result, spill)


def ask(rt: CellRuntime, prompt: Any, context: Any, caller: Any = None) -> Any:
    flat = [v for row in cells.to_rows(context) for v in row] if context is not None else []
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
        return [["engine", cells.error_value(e)], ["last error", str(e)]]
    snap = b.snapshot()
    cache = b.cache.stats()
    # per request, once: answered from memory or the disk cache, joined to the same request in flight,
    # or asked of the engine (each call the engine got)
    from_cache = rt.resolver.memo_hits + snap["cache_hits"]
    joined, asked = snap["deduplicated"], snap["engine_requests"]
    rate = round(from_cache / (from_cache + asked), 4) if from_cache + asked else ""
    return [
        ["engine", b.engine.describe()],
        ["model", snap["model"]],
        ["starter model", "yes — configure a Qwen model for real work" if b.learned.starter else "no"],
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
# The one dispatch table of the function table (``sheet/table.py``: names, arguments, help): each
# function's body, called with the runtime, its arguments in the table's order, its caller and the
# workbook's folder, and the width of its result (1: one value). Every door calls through ``call``.
TABLE: dict[str, tuple[Body, int]] = {
    "QWEN_SCREEN": (lambda rt, a, caller, folder: screen(rt, a[0], flag(a[1]), a[2], caller, folder),
                    len(cells.SPILL_FIELDS)),
    "QWEN": (lambda rt, a, caller, folder: ask(rt, a[0], a[1], caller), 1),
    "QWEN_EXTRACT": (lambda rt, a, caller, folder: extract(rt, a[0], a[1], a[2], caller), 1),
    "QWEN_CLASSIFY": (lambda rt, a, caller, folder: classify(rt, a[0], a[1], caller), 1),
    "QWEN_HIGHLIGHTS": (lambda rt, a, caller, folder: highlights(rt, a[0], a[1], a[2], caller, folder), 1),
    "QWEN_STATUS": (lambda rt, a, caller, folder: status(rt), STATUS_WIDTH),
}
