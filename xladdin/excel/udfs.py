"""Excel worksheet functions (xlwings UDFs). Thin: convert arguments, call a
task through the process-wide runtime, return cell values. Every failure is a
cell value starting ``#QWEN!``; nothing raises into Excel.

In xlwings.conf (or the add-in settings) set ``UDF Modules`` to
``xladdin.excel.udfs`` and click Import Functions. ``caller`` is filled in by
xlwings and does not appear in Excel.
"""

from __future__ import annotations

import atexit
from typing import Any

import xlwings as xw

from ..sheet import functions
from ..sheet.pending import CellRuntime
from . import com

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
        _runtime = CellRuntime(told=com.recalculate if com.available() else None)
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
    folder = com.book_folder(caller) if caller is not None else None
    if rules is None and caller is not None:
        rules = com.book_rules(caller)  # the workbook's Rules sheet, when it has one
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
    folder = com.book_folder(caller) if caller is not None else None
    return functions.call(runtime(), "QWEN_HIGHLIGHTS", (report, points, max_chars), caller, folder)


@xw.func
def QWEN_STATUS():
    """Engine, model, queue, cache entries and hit rate, last error — as a two-column table."""
    return functions.call(runtime(), "QWEN_STATUS", ())
