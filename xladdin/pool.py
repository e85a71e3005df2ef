"""Reading a stock pool (CSV or XLSX) and recognising its columns.

Headers are matched after NFKC normalisation, case-folding and removing
spaces; Chinese and English names are both known. A unit in brackets on a
money column (``净利润(万元)``) converts the values to 亿元.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .tasks.screen import MONEY_UNITS

FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "code": ("代码", "股票代码", "证券代码", "code", "ts_code", "symbol", "ticker", "stock_code"),
    "name": ("名称", "股票名称", "证券简称", "股票简称", "简称", "name", "stock_name"),
    "industry": ("行业", "所属行业", "申万行业", "industry", "sector"),
    "pe_ttm": ("市盈率ttm", "市盈率-ttm", "pe-ttm", "pe_ttm", "pettm", "pe(ttm)", "市盈率(ttm)", "市盈率", "pe"),
    "roe": ("roe", "净资产收益率", "roe(%)", "净资产收益率(%)"),
    "eps": ("每股收益", "基本每股收益", "eps", "每股收益(元)"),
    "report_text": ("财报摘要", "报告摘要", "业绩摘要", "摘要", "report_text", "report", "summary", "reportsummary"),
    "st": ("st", "is_st", "是否st", "st标记"),
    "revenue": ("营业收入", "营收", "revenue"),
    "net_profit": ("净利润", "归母净利润", "net_profit", "netprofit"),
    "net_profit_prev": ("上年净利润", "去年净利润", "上年归母净利润", "net_profit_prev", "prior_net_profit"),
}
MONEY_FIELDS = ("revenue", "net_profit", "net_profit_prev")
REQUIRED = ("code", "name")
_UNIT = re.compile(r"^(.*?)[(（\[]([^)）\]]*)[)）\]]$")


def _norm(header: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", str(header))).lower()


_LOOKUP = {_norm(alias): name for name, aliases in FIELD_ALIASES.items() for alias in aliases}


def match_header(header: Any) -> tuple[str, float] | None:
    """``(field, scale)`` for a recognised header, else ``None``."""
    if header is None:
        return None
    h = _norm(header)
    if h in _LOOKUP:
        return _LOOKUP[h], 1.0
    m = _UNIT.match(h)
    if m and m.group(1) in _LOOKUP:
        name, unit = _LOOKUP[m.group(1)], m.group(2)
        if name in MONEY_FIELDS:
            return name, MONEY_UNITS.get(unit, 1.0)
        return name, 1.0
    return None


@dataclass
class Pool:
    path: Path
    columns: list[str]
    rows: list[list[Any]]
    mapping: dict[str, int] = field(default_factory=dict)  # field → column index
    scale: dict[str, float] = field(default_factory=dict)

    def records(self) -> list[dict[str, Any]]:
        """Rows as task input dicts (canonical field names; money scaled to 亿元)."""
        out = []
        for row in self.rows:
            rec: dict[str, Any] = {}
            for name, idx in self.mapping.items():
                value = row[idx] if idx < len(row) else None
                factor = self.scale.get(name, 1.0)
                if factor != 1.0 and isinstance(value, int | float) and not isinstance(value, bool):
                    value = value * factor
                rec[name] = value
            out.append(rec)
        return out


def is_empty_row(row: list[Any]) -> bool:
    return all(v in (None, "") for v in row)


def pool_from_table(header: list[Any], rows: list[list[Any]], path: Path) -> Pool:
    columns = [("" if h is None else str(h)).strip() for h in header]
    pool = Pool(path, columns, rows)
    for i, col in enumerate(columns):
        m = match_header(col)
        if m and m[0] not in pool.mapping:
            pool.mapping[m[0]] = i
            pool.scale[m[0]] = m[1]
    for name in REQUIRED:
        if name not in pool.mapping:
            known = "/".join(FIELD_ALIASES[name][:4])
            raise InputError("columns", f"have no {name} column in {path.name} (expected one of {known}); found: "
                             + ", ".join(columns))  # fmt: skip
    return pool


def read_pool(path: str | Path) -> Pool:
    path = Path(path)
    if not path.is_file():
        raise InputError("input", f"file not found: {path}")
    suffix = path.suffix.lower()
    if suffix in (".xlsx", ".xlsm"):
        table = _read_xlsx(path)
    elif suffix in (".csv", ".txt", ".tsv"):
        table = _read_csv(path)
    else:
        raise InputError("input", f"{path.name}: expected a .csv or .xlsx file")
    table = [r for r in table if not is_empty_row(r)]
    if not table:
        raise InputError("input", f"{path.name} is empty")
    return pool_from_table(table[0], table[1:], path)


def _read_csv(path: Path) -> list[list[Any]]:
    raw = path.read_bytes()
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            text = raw.decode(encoding)
            break
        except UnicodeDecodeError:
            continue
    else:
        raise InputError("input", f"{path.name}: not UTF-8 or GBK text")
    dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
    return [list(r) for r in csv.reader(io.StringIO(text, newline=""), dialect=dialect)]


def _read_xlsx(path: Path) -> list[list[Any]]:
    import openpyxl

    wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        ws = wb["Pool"] if "Pool" in wb.sheetnames else wb.worksheets[0]
        return [list(r) for r in ws.iter_rows(values_only=True)]
    finally:
        wb.close()
