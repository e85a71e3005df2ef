"""Reading a stock pool (CSV or XLSX) and recognising its columns.

Headers are matched after NFKC normalisation, case-folding and removing
spaces; Chinese and English names are both known. A unit in brackets on a
money column (``净利润(万元)``) converts the values to 亿元 — the same way for a
CSV's text and an XLSX's numbers. An XLSX cell formatted as a percentage
(value 0.3419, shown 34.19 %) is read as the percent points it shows.
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
from .tasks.fields import parse_number
from .tasks.figures import MONEY_UNITS

FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "code": ("代码", "股票代码", "证券代码", "code", "ts_code", "symbol", "ticker", "stock_code"),
    "name": ("名称", "股票名称", "证券简称", "股票简称", "简称", "name", "stock_name"),
    "industry": ("行业", "所属行业", "申万行业", "industry", "sector"),
    "pe_ttm": ("市盈率ttm", "市盈率-ttm", "pe-ttm", "pe_ttm", "pettm", "pe(ttm)", "市盈率(ttm)", "市盈率", "pe"),
    "roe": ("roe", "净资产收益率", "roe(%)", "净资产收益率(%)"),
    "eps": ("每股收益", "基本每股收益", "eps", "每股收益(元)"),
    "report_text": ("财报摘要", "报告摘要", "业绩摘要", "摘要", "report_text", "report", "summary", "reportsummary"),
    "st": ("st", "is_st", "是否st", "st标记"),
    "report_file": ("报告文件", "报告路径", "年报文件", "研报文件", "report_file", "report_path", "file", "pdf"),
    "revenue": ("营业收入", "营收", "revenue"),
    "net_profit": ("净利润", "归母净利润", "net_profit", "netprofit"),
    "net_profit_prev": ("上年净利润", "去年净利润", "上年归母净利润", "net_profit_prev", "prior_net_profit"),
}
MONEY_FIELDS = ("revenue", "net_profit", "net_profit_prev")
NUMBER_FIELDS = ("pe_ttm", "roe", "eps", *MONEY_FIELDS)
REQUIRED = ("code", "name")
_UNIT = re.compile(r"^(.*?)[(（\[]([^)）\]]*)[)）\]]$")
# A text cell that is plainly a number (no leading zero to keep, as a code has): written back as a number.
_PLAIN_NUMBER = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$")
SAMPLE_POOL = Path(__file__).parent / "data" / "sample_pool.csv"  # 21 companies, shipped with the package
CSV_FIELD_LIMIT = 64 << 20  # one CSV cell may hold a long report (the task trims it); the default is 128 KiB


def _norm(header: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", str(header))).lower()


_LOOKUP = {_norm(alias): name for name, aliases in FIELD_ALIASES.items() for alias in aliases}


def money_unit(unit: str, header: str) -> float:
    """The factor to 亿元 of a money column's unit (``万元``, ``万``, ``千万元``); an unknown unit or another
    currency is an error naming the column, never a silent 亿元."""
    written = unit if unit.endswith("元") else unit + "元"
    factor = {**MONEY_UNITS, "千万元": 0.1, "十万元": 1e-3}.get(written)
    if factor is None:
        raise InputError("columns", f"{header!r}: unknown money unit {unit!r} (known: 元, 千元, 万元, 百万元, "
                         "千万元, 亿元; figures in other currencies are not converted)")  # fmt: skip
    return factor


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
            return name, money_unit(unit, str(header))
        return name, 1.0
    return None


@dataclass
class Pool:
    path: Path
    columns: list[str]
    rows: list[list[Any]]
    mapping: dict[str, int] = field(default_factory=dict)  # field → column index
    scale: dict[str, float] = field(default_factory=dict)

    reports: dict[int, Path] = field(default_factory=dict)  # row index → report file found by ``match_reports``

    def records(self) -> list[dict[str, Any]]:
        """Rows as task input dicts (canonical field names; money scaled to 亿元; a report file's
        relative path taken from the pool file's folder)."""
        out = []
        for i, row in enumerate(self.rows):
            rec: dict[str, Any] = {}
            for name, idx in self.mapping.items():
                value = row[idx] if idx < len(row) else None
                factor = self.scale.get(name, 1.0)
                if factor != 1.0:
                    value = _scaled(value, factor, name)
                rec[name] = value
            if isinstance(rec.get("report_file"), str) and rec["report_file"].strip():
                given = Path(rec["report_file"].strip()).expanduser()
                rec["report_file"] = str(given if given.is_absolute() else self.path.parent / given)
            elif i in self.reports:
                rec["report_file"] = str(self.reports[i])
            out.append(rec)
        return out

    def match_reports(self, folder: str | Path) -> int:
        """Give each row without a report file the file in ``folder`` named with its stock code;
        returns how many rows got one."""
        from .documents import match_reports
        from .tasks.fields import normalize_code

        codes: dict[int, str] = {}
        idx = self.mapping["code"]
        for i, row in enumerate(self.rows):
            try:
                codes[i] = normalize_code(row[idx] if idx < len(row) else None)
            except InputError:
                continue  # the row's own error names its code
        found = match_reports(list(codes.values()), Path(folder))
        self.reports = {i: found[c[:6]] for i, c in codes.items() if c[:6] in found}
        return len(self.reports)

    def typed_rows(self) -> list[list[Any]]:
        """The input rows as a report writes them back: a number field's text (``"32.78%"``,
        ``"1,234.5"``) as its number, in the column's own unit; a plain-number text of an
        unrecognised column as a number; everything else as given."""
        numeric = {idx: name for name, idx in self.mapping.items() if name in NUMBER_FIELDS}
        keep = {idx for name, idx in self.mapping.items() if name not in NUMBER_FIELDS}
        out = []
        for raw in self.rows:
            row = list(raw) + [None] * (len(self.columns) - len(raw))
            for i, value in enumerate(row):
                if not isinstance(value, str) or i in keep:
                    continue
                if i in numeric:
                    try:
                        number = parse_number(value, numeric[i])
                    except InputError:
                        continue  # shown as given; the row's error names the field
                    if number is not None:
                        row[i] = int(number) if number.is_integer() and "." not in value else number
                elif _PLAIN_NUMBER.match(value.strip()):
                    row[i] = float(value) if "." in value else int(value)
            out.append(row)
        return out


def _scaled(value: Any, factor: float, name: str) -> Any:
    """``value`` (a number or its text) times ``factor``; a value that is not a number is left
    for the task to report, naming the field."""
    try:
        number = parse_number(value, name)
    except InputError:
        return value
    return None if number is None else round(number * factor, 10)


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


def pool_from_frame(df: Any, source: str = "DataFrame") -> Pool:
    """A pandas DataFrame as a pool: its columns are the header, missing values (NaN, NaT, None)
    are blanks."""
    cells = df.astype(object).where(df.notna(), None)
    return pool_from_table(list(df.columns), cells.values.tolist(), Path(source))


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
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)
    reader = csv.reader(io.StringIO(text, newline=""), dialect=dialect)
    try:
        return [list(r) for r in reader]
    except csv.Error as e:
        raise InputError("input", f"{path.name} line {reader.line_num}: {e}") from None


def _read_xlsx(path: Path) -> list[list[Any]]:
    import zipfile

    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    try:
        wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except (zipfile.BadZipFile, InvalidFileException, KeyError, ValueError, OSError) as e:
        raise InputError("input", f"{path.name} is not a readable .xlsx workbook ({e.__class__.__name__}: "
                         f"{str(e)[:120]})") from None  # fmt: skip
    try:
        ws = wb["Pool"] if "Pool" in wb.sheetnames else wb.worksheets[0]
        return [[_cell_value(c) for c in r] for r in ws.iter_rows()]
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as e:
        raise InputError("input", f"{path.name}: cannot read its cells ({e.__class__.__name__}: {str(e)[:120]})") \
            from None
    finally:
        wb.close()


def _cell_value(cell: Any) -> Any:
    """A cell's value as the user sees it: a percent-formatted 0.3419 is 34.19 (percent points)."""
    value = getattr(cell, "value", None)
    if isinstance(value, int | float) and not isinstance(value, bool) and "%" in (cell.number_format or ""):
        return round(value * 100, 10)
    return value
