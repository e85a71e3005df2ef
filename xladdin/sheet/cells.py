"""Pure conversions between Excel values and task inputs/outputs.

Excel (through xlwings' converters) hands us scalars, 1-D lists, 2-D lists
with ``None`` for blanks, or numpy arrays. Results go back as 2-D lists whose
shape never depends on success or failure, so a spill never jumps around.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ERROR_PREFIX, InputError, XladdinError, error_text, first_error
from ..reading.pool import Pool, pool_from_frame, pool_from_table
from ..tasks.rules import DEFAULT_RULES, Rules
from ..tasks.screen import ScreenResult

# Column order of a row passed without a header: 代码 名称 行业 市盈率TTM ROE 每股收益 财报摘要 (then optional)
POSITIONAL = ("code", "name", "industry", "pe_ttm", "roe", "eps", "report_text",
              "net_profit", "net_profit_prev", "revenue", "st")
SPILL_FIELDS = tuple(n for n in ScreenResult.model_fields if n != "provenance")
PENDING = "#QWEN… 计算中 pending"
RULES_SHEET = "Rules"
RULES_ADDRESS = "A2:B20"  # the one Rules range: QWEN_SCREEN without a rules argument, the template and Refresh
RULES_REF = f"{RULES_SHEET}!" + ":".join("$" + c[0] + "$" + c[1:] for c in RULES_ADDRESS.split(":"))


def to_rows(value: Any) -> list[list[Any]]:
    """Any Excel argument as a 2-D list (a 1-D range is one row)."""
    if hasattr(value, "tolist"):  # numpy array
        value = value.tolist()
    if not isinstance(value, list | tuple):
        return [[value]]
    if not value:
        return []
    if not isinstance(value[0], list | tuple):
        return [list(value)]
    return [list(r) for r in value]


def table_frame(rows: list[list[Any]]) -> Any:
    """A range with its header row as a DataFrame through xlwings' own DataFrame converter — the
    frame ``xladdin.screen(df)`` takes — or ``None`` without pandas (the rows are read as they are)."""
    try:
        from xlwings.conversion.pandas_conv import PandasDataFrameConverter
    except ImportError:  # pandas is optional
        return None
    return PandasDataFrameConverter.read_value(rows, {"index": False, "header": True})


def _blank(row: list[Any]) -> bool:
    return all(v is None or (isinstance(v, str) and not v.strip()) for v in row)


def screen_records(value: Any, header: bool) -> tuple[list[dict[str, Any] | None], list[str] | None]:
    """Task input dicts (``None`` for a blank row, kept so the spill lines up) and the header if any."""
    records, pool = screen_table(value, header)
    return records, pool.columns if header else None


def screen_table(value: Any, header: bool) -> tuple[list[dict[str, Any] | None], Pool]:
    """``screen_records``'s dicts and the range as a pool, one row per record (a row without a header has
    the ``POSITIONAL`` columns: no 公告日期 / 报告期), for ``screen.date_rows``."""
    rows = to_rows(value)
    if header:
        if not rows:
            raise InputError("header", "row is missing")
        frame = table_frame(rows)
        if frame is not None:
            pool = pool_from_frame(frame, "range")
        else:
            pool = pool_from_table(rows[0], rows[1:], Path("range"))
        records = pool.records()
        return [None if _blank(r) else rec for r, rec in zip(rows[1:], records, strict=True)], pool
    out: list[dict[str, Any] | None] = []
    for row in rows:
        if len(row) > len(POSITIONAL):
            raise InputError("range", f"has {len(row)} columns; without a header at most {len(POSITIONAL)} "
                             f"({'/'.join(POSITIONAL[:7])}…)")
        out.append(None if _blank(row) else dict(zip(POSITIONAL, row, strict=False)))
    return out, Pool(Path("range"), list(POSITIONAL), rows, {name: i for i, name in enumerate(POSITIONAL)})


def result_row(res: ScreenResult) -> list[Any]:
    """The spill: the result's own cells up to its provenance, blanks for missing values."""
    return ["" if v is None else v for v in res.cells()[: len(SPILL_FIELDS)]]


def filler_row(first: str, width: int = len(SPILL_FIELDS)) -> list[Any]:
    return [first] + [""] * (width - 1)


def error_value(err: BaseException) -> str:
    msg = error_text(err) if isinstance(err, XladdinError) else f"{ERROR_PREFIX} internal error: {err}"
    return msg[:255]


def error_row(err: BaseException, width: int = len(SPILL_FIELDS)) -> list[Any]:
    return filler_row(error_value(err), width)


def spill_header() -> list[str]:
    return ScreenResult.headers()[: len(SPILL_FIELDS)]


def rules_from_range(value: Any) -> Rules:
    """A Rules sheet range: rows of (key, value[, description]); a header row and blanks are skipped."""
    if value is None:
        return DEFAULT_RULES
    data: dict[str, Any] = {}
    for row in to_rows(value):
        if len(row) < 2 or row[0] is None or row[1] is None:
            continue
        key = str(row[0]).strip()
        if key.lower() in ("key", "参数", "name"):
            continue
        if key not in Rules.model_fields:
            raise InputError("rules", f"unknown key {key!r} (known: {', '.join(Rules.model_fields)})")
        data[key] = row[1]
    try:
        return Rules.model_validate(data)
    except ValidationError as e:
        raise InputError("rules", first_error(e)) from None


def rules_rows(rules: Rules = DEFAULT_RULES) -> list[list[Any]]:
    """Rows for a Rules sheet: key, value, description."""
    return [[name, getattr(rules, name), f.title or ""] for name, f in Rules.model_fields.items()]
