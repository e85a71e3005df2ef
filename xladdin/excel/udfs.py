"""Excel worksheet functions (xlwings UDFs). Thin: convert arguments, call a
task through the process-wide runtime, return cell values. Every failure is a
cell value starting ``#QWEN!``; nothing raises into Excel.

In xlwings.conf (or the add-in settings) set ``UDF Modules`` to
``xladdin.excel.udfs`` and click Import Functions. ``caller`` is filled in by
xlwings and does not appear in Excel.
"""

from __future__ import annotations

import atexit
import functools
from typing import Any

import xlwings as xw

from .. import documents
from ..errors import XladdinError
from ..tasks import AskTask, ClassifyTask, ExtractTask, HighlightsTask, ScreenTask
from . import cells, com
from .pending import CellRuntime

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
        _runtime = CellRuntime(rewrite=com.rewrite if com.available() else None)
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


def _cell_errors(width: int = 1):
    """Turn any exception into a ``#QWEN!`` value of the function's usual shape."""

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                runtime().last_error = str(e)
                value = cells.error_value(e)
                return [cells.filler_row(value, width)] if width > 1 else value

        return inner

    return wrap


def _single(rows: list[list[Any]]) -> Any:
    return rows[0][0]


@xw.func
@_args
@_cell_errors(width=len(cells.SPILL_FIELDS))
def QWEN_SCREEN(values, header=False, rules=None, caller=None):
    """Screen one row (代码 名称 行业 市盈率TTM ROE 每股收益 财报摘要 …) or a table with its header row
    (header=TRUE). Spills risk level, score, reason, flags, figures. rules: a key/value range; without it
    the workbook's Rules sheet is read when there is one."""
    records, _ = cells.screen_records(values, bool(header))
    if caller is not None:  # a report file's relative path: from the workbook's folder
        folder = com.book_folder(caller)
        records = [documents.from_folder(r, folder) for r in records]
    rt = runtime()
    if rules is None and caller is not None:
        rules = com.book_rules(caller)  # the workbook's Rules sheet, when it has one
    task = ScreenTask(rules=cells.rules_from_range(rules), max_text_chars=rt.max_text_chars)
    rows = rt.rows(task, records, cells.result_row, len(cells.SPILL_FIELDS), caller)
    return [cells.spill_header(), *rows] if header else rows


@xw.func
@_args
@_cell_errors()
def QWEN(prompt, context=None, caller=None):
    """Ask the local model; context: cells whose text is given with the question."""
    flat = [v for row in cells.to_rows(context) for v in row] if context is not None else []
    record = {"prompt": prompt, "context": flat}
    return _single(runtime().rows(AskTask(), [record], lambda r: [r.answer], 1, caller))


@xw.func
@_cell_errors()
def QWEN_EXTRACT(text, item, unit="亿元", caller=None):
    """A figure from report text as a number in unit (default 亿元; 元 万元 百万元 % 元/股 …)."""
    record = {"text": text, "item": item, "unit": unit}

    def to_row(r):
        if r.value is None:
            return [f"#QWEN! {r.note}"]
        return [r.value]

    return _single(runtime().rows(ExtractTask(), [record], to_row, 1, caller))


@xw.func
@_args
@_cell_errors()
def QWEN_CLASSIFY(text, labels, caller=None):
    """One of labels (a range or a comma-separated text) for text."""
    record = {"text": text, "labels": labels}
    return _single(runtime().rows(ClassifyTask(), [record], lambda r: [r.label], 1, caller))


@xw.func
@_cell_errors()
def QWEN_HIGHLIGHTS(report, points=None, max_chars=None, caller=None):
    """Numbered results highlights of a report (its text, or a .pdf/.txt/.md/.html path), every number
    checked against the figures code read and the source; points: how many (default 3), max_chars: per
    highlight (default 60). A highlight with an unverified number is left out (QWEN_STATUS, the CLI's
    report say how many)."""
    record = {"report_text": report, "max_chars": max_chars}
    if caller is not None:
        record = documents.from_folder(record, com.book_folder(caller))
    return _single(runtime().rows(HighlightsTask(points), [record], lambda r: [r.highlights or f"#QWEN! {r.notes}"], 1,
                                  caller))


@xw.func
@_cell_errors(width=2)
def QWEN_STATUS():
    """Engine, model, queue, cache entries and hit rate, last error — as a two-column table."""
    rt = runtime()
    try:
        b = rt.batcher
    except XladdinError as e:
        return [["engine", cells.error_value(e)], ["last error", str(e)]]
    snap = b.snapshot()
    cache = b.cache.stats()
    # per request, once: answered from memory or the disk cache, or asked of the engine
    from_cache = rt.resolver.memo_hits + snap["cache_hits"]
    asked = snap["submitted"] - snap["cache_hits"]
    rate = round(from_cache / (from_cache + asked), 4) if from_cache + asked else ""
    return [
        ["engine", b.engine.describe()],
        ["model", snap["model"]],
        ["starter model", "yes — configure a Qwen model for real work" if b.engine.starter else "no"],
        ["queue", snap["queued"]],
        ["in flight", snap["in_flight"]],
        ["pending cells", rt.pending_cells],
        ["requests", from_cache + asked],
        ["asked of the engine", asked],
        ["cache entries", cache["entries"]],
        ["cache hit rate", rate],
        ["cache", cache["directory"] if cache["enabled"] else (b.cache.warning or "off")],
        ["last error", rt.last_error or snap["last_error"] or ""],
    ]
