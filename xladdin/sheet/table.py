"""The one function table of every grid: the Excel UDFs' arguments (checked against ``excel/udfs.py`` by
a test), Calc's UNO interface and help (``calc/build.py``), the Office add-in's ``functions.json`` and
WPS's declarations (``metadata``) all come from ``FUNCTIONS``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


FUNCTIONS = (
    Function("QWEN_SCREEN", "qwenScreen", "Screen one row (代码 名称 行业 市盈率TTM ROE 每股收益 财报摘要 …) or a "
             "table with its header row: risk level, score, reason, flags, figures. Enter it as an array formula "
             "as wide as its result.",
             (Param("values", "the row, or the table with its header row", "range", optional=False),
              Param("header", "TRUE: the first row is the header (default FALSE)", default=False),
              Param("rules", "a key/value range of rule thresholds (e.g. Rules.$A$2:$B$20)", "range")),
             spill=True),
    Function("QWEN", "qwen", "Ask the local model.",
             (Param("prompt", "the question", optional=False),
              Param("context", "cells whose text is given with it", "range"))),
    Function("QWEN_EXTRACT", "qwenExtract", "A figure from report text as a number in a unit.",
             (Param("text", "report text", optional=False), Param("item", "the figure, e.g. 营业收入", optional=False),
              Param("unit", "亿元 (default), 元, 万元, 百万元, %, 元/股 …", default="亿元"))),
    Function("QWEN_CLASSIFY", "qwenClassify", "One of the labels for a text.",
             (Param("text", "the text", optional=False),
              Param("labels", "a range or a comma-separated text", "list", optional=False))),
    Function("QWEN_HIGHLIGHTS", "qwenHighlights", "Numbered results highlights of a report, every number checked.",
             (Param("report", "report text or a .pdf/.txt/.md/.html path", optional=False),
              Param("points", "how many (default 3)"), Param("max_chars", "characters per highlight (60)"))),
    Function("QWEN_STATUS", "qwenStatus", "Engine, model, queue, cache and last error as a two-column table. "
             "Enter it as an array formula two columns wide.", (), spill=True, volatile=True),
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
