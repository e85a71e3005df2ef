"""The worksheet functions of every grid, in one table (``FUNCTIONS``: each one's name, help, arguments,
result shape and body), and the one entry every door calls them through (``call``): Excel (``excel/udfs.py``,
through xlwings), LibreOffice Calc (``xladdin.calc``) and the cell service (Excel for Mac and the web, WPS).
Arguments as the spreadsheet gives them in, cell values out, through one process-wide ``CellRuntime``. What
differs between the doors stays with them: where the workbook's folder and Rules sheet come from, and how a
waiting cell is recalculated."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ERROR_PREFIX, XladdinError
from ..tasks import AskTask, ClassifyTask, ExtractTask, HighlightsTask, ScreenTask
from ..tasks.screen import date_rows
from . import cells
from .pending import CellRuntime

STATUS_WIDTH, STATUS_ROWS = 2, 13  # QWEN_STATUS's table


def call(rt: CellRuntime, name: str, args: Sequence[Any], caller: Any = None, folder: Path | None = None) -> Any:
    """The one entry of every door: function ``name`` of the table (``FUNCTIONS``) with its arguments in the
    table's order (``caller``: what a waiting call is known by; ``folder``: the workbook's, a report file's
    relative path is taken from it). Any failure is a ``#QWEN!`` value of the function's usual shape, and
    the runtime's last error."""
    try:
        return BY_NAME[name].body(rt, args, caller, folder)
    except Exception as e:
        return failed(rt, name, e)


def settled(rt: CellRuntime, name: str, value: Callable[[], Any]) -> Any:
    """A waiting call's value made from its answers (``pending.Answered.made``), guarded as ``call``."""
    try:
        return value()
    except Exception as e:
        return failed(rt, name, e)


def failed(rt: CellRuntime, name: str, error: Exception) -> Any:
    """``error`` as function ``name``'s value: a ``#QWEN!`` value of its usual shape (the runtime's last error)."""
    rt.last_error = str(error)
    width = BY_NAME[name].width
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
             spill=True, width=len(cells.SPILL_FIELDS),
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
