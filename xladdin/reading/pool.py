"""Reading a stock pool (CSV or XLSX), recognising its columns, and parsing its cells' values (a code, a
number, a flag, a text: ``parse_number``, ``normalize_code`` …, the same parsers every task's input uses).

Headers are matched after NFKC normalisation, case-folding and removing
spaces; Chinese and English names are both known. A unit in brackets on a
money column (``净利润(万元)``) converts the values to 亿元 — the same way for a
CSV's text and an XLSX's numbers. An XLSX cell formatted as a percentage
(value 0.3419, shown 34.19 %) is read as the percent points it shows.
"""

from __future__ import annotations

import csv
import html.parser
import io
import math
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..periods import ReportDates, from_cells
from .documents import decode_text, match_reports
from .figures import MONEY_UNITS

# Headers as the terminals and data services write them (after ``_norm``: NFKC, no spaces, lower case).
# Where they come from: Wind's multi-line export headers as users paste them (``市盈率PE(TTM)`` /
# ``[交易日期] …``, ``净资产收益率ROE(平均)`` / ``[报告期] …`` / ``[单位] %``, ``归属母公司股东的净利润``,
# ``所属申万行业名称``); iFinD and 同花顺 / 通达信 tables (``市盈(TTM)``, ``市盈率(PE,TTM)``,
# ``净资产收益率(%)``, ``归母净利润``, ``所属行业``); cninfo's field names (``证券代码``, ``证券简称``,
# ``归属于母公司所有者净利润``, ``净资产收益率-加权``: lining1111/FinanceTool, Stock/XSB/FinancialRatios.go);
# tushare's CSV columns (``所属行业``, ``净利润(万元)``, ``营业收入(百万元)``, ``净资产收益率(%)``:
# wengowl/stock, data/readme.txt); ``营业总收入`` (jsyzc2019/Quant_Share, Wiki/fundamentals_income.md).
FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "code": ("代码", "股票代码", "证券代码", "code", "ts_code", "symbol", "ticker", "stock_code", "wind代码"),
    "name": ("名称", "股票名称", "证券简称", "股票简称", "简称", "证券名称", "name", "stock_name"),
    "industry": ("行业", "所属行业", "申万行业", "所属申万行业名称", "所属申万行业", "所属证监会行业名称",
                 "所属同花顺行业", "所属通达信行业", "细分行业", "industry", "sector"),
    "pe_ttm": ("市盈率ttm", "市盈率-ttm", "pe-ttm", "pe_ttm", "pettm", "pe(ttm)", "市盈率(ttm)", "市盈率", "pe",
               "市盈率pe(ttm)", "市盈(ttm)", "市盈率(pe,ttm)", "市盈率(ttm)(倍)"),  # never 市盈率(动) / (静): OTHER_PE
    "roe": ("roe", "净资产收益率", "roe(%)", "净资产收益率(%)", "净资产收益率roe(平均)", "净资产收益率roe(加权)",
            "净资产收益率-加权", "加权净资产收益率", "加权平均净资产收益率", "roe(平均)", "roe(加权)"),
    "eps": ("每股收益", "基本每股收益", "eps", "每股收益(元)", "每股收益eps-基本", "基本每股收益(元)", "eps(基本)"),
    "report_text": ("财报摘要", "报告摘要", "业绩摘要", "摘要", "report_text", "report", "summary", "reportsummary",
                    "研报正文", "研报摘要", "研报", "正文", "全文", "内容", "text", "content"),
    "st": ("st", "is_st", "是否st", "st标记"),
    "report_file": ("报告文件", "报告路径", "年报文件", "研报文件", "report_file", "report_path", "file", "pdf"),
    "revenue": ("营业收入", "营收", "营业总收入", "revenue"),
    "net_profit": ("净利润", "归母净利润", "归属母公司股东的净利润", "归属于母公司所有者净利润",
                   "归属于母公司股东的净利润", "归属于上市公司股东的净利润", "net_profit", "netprofit"),
    "net_profit_prev": ("上年净利润", "去年净利润", "上年归母净利润", "net_profit_prev", "prior_net_profit"),
    # when the row's report became public, and its period (tushare's ann_date / f_ann_date and end_date,
    # Wind's 公告日期 and 报告期): not task input, read by ``report_dates`` for ``--as-of``
    "published": ("公告日期", "公告日", "披露日期", "实际披露日期", "首次公告日期", "公布日期", "ann_date",
                  "f_ann_date", "publication_date", "published"),
    "period": ("报告期", "报告期间", "财报期", "end_date", "report_period", "period"),
}
DATE_FIELDS = ("published", "period")  # read by ``Pool.report_dates``, never given to a task
MONEY_FIELDS = ("revenue", "net_profit", "net_profit_prev")
NUMBER_FIELDS = ("pe_ttm", "roe", "eps", *MONEY_FIELDS)
REQUIRED = ("code", "name")
# a file of notes or reports to write highlights of: a report's text or file; without a code column its rows
# are numbered (a 行号 column is put first)
NOTES_REQUIRED = (("report_text", "report_file"),)
ROW_NUMBER = "行号"
_UNIT = re.compile(r"^(.*?)[(（\[]([^)）\]]*)[)）\]]$")
# A text cell that is plainly a number (no leading zero to keep, as a code has): written back as a number.
_PLAIN_NUMBER = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$")
SAMPLE_POOL = Path(__file__).parent.parent / "data" / "sample_pool.csv"  # 21 companies, shipped with the package
CSV_FIELD_LIMIT = 64 << 20  # one CSV cell may hold a long report (the task trims it); the default is 128 KiB


# A PE that is not PE-TTM (its header names another profit than the last twelve months'): never read
# as PE-TTM, and said so. 东方财富 / 同花顺 / 通达信 show 市盈率(动) and 市盈率(静); Wind writes PE(LYR).
OTHER_PE = (
    (re.compile(r"动|预测|预期|一致|forward|fwd|\bf?y\d|20\d\de"),
     "a dynamic or forward PE (on a projected profit), not PE-TTM"),
    (re.compile(r"静|lyr|上年|年报"), "a static PE (on the last annual report's profit), not PE-TTM"),
)
_PE_HEADER = re.compile(r"市盈|^pe(?![a-z])|^p/e|priceearnings|pe_?ratio|peratio")


def other_pe(header: Any) -> str | None:
    """Why a header that names a PE is not PE-TTM (``市盈率(动)``, ``PE(LYR)``, ``静态市盈率``), else ``None``."""
    if header is None:
        return None
    h = _norm(_WIND_PART.sub("", str(header)).strip().split("\n")[0])
    if "ttm" in h or not _PE_HEADER.search(h):
        return None
    return next((why for words, why in OTHER_PE if words.search(h)), None)


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
                         "千万元, 亿元; figures in other currencies are not converted)")
    return factor


_WIND_PART = re.compile(r"\[(交易日期|报告期|单位|币种|截止日期|日期)\]\s*([^\[\n]*)")


def header_field(header: Any) -> str | None:
    """The field a column's header names, else ``None`` (a recognised header with a bad unit too)."""
    try:
        return (match_header(header) or (None,))[0]
    except InputError:
        return None


def match_header(header: Any) -> tuple[str, float] | None:
    """``(field, scale)`` for a recognised header, else ``None``. A Wind / Choice header is its first
    line; its ``[单位]`` part is the column's unit (``[单位] 元``, ``[单位] %``)."""
    if header is None:
        return None
    text = str(header)
    unit_part = None
    if "[" in text or "\n" in text:
        parts = dict((k, v.strip()) for k, v in _WIND_PART.findall(text))
        unit_part = parts.get("单位")
        text = _WIND_PART.sub("", text).strip().split("\n")[0]
    h = _norm(text)
    if other_pe(text):
        return None
    if unit_part:
        found = _LOOKUP.get(h) or (_LOOKUP.get(m.group(1)) if (m := _UNIT.match(h)) else None)
        if found is None:
            return None
        unit = _norm(unit_part)
        return found, (money_unit(unit, str(header)) if found in MONEY_FIELDS else 1.0)
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
    skipped: list[str] = field(default_factory=list)  # lines above the header and notes below the table

    def unrecognised(self) -> list[str]:
        """The columns no field was read from (kept in the report as they are); one that looks like a
        field but is another measure (``市盈率(动)``) with the reason it was not read."""
        used = set(self.mapping.values())
        return [c + (f" ({why}: not read)" if (why := other_pe(c)) else "")
                for i, c in enumerate(self.columns) if i not in used and c]

    reports: dict[int, Path] = field(default_factory=dict)  # row index → report file found by ``match_reports``

    def records(self) -> list[dict[str, Any]]:
        """Rows as task input dicts (canonical field names; money scaled to 亿元; a report file as
        given, else the one ``match_reports`` found: a front door places it, ``documents.Reports``)."""
        out = []
        for i, row in enumerate(self.rows):
            rec: dict[str, Any] = {}
            for name, idx in self.mapping.items():
                if name in DATE_FIELDS:
                    continue
                value = row[idx] if idx < len(row) else None
                factor = self.scale.get(name, 1.0)
                if factor != 1.0:
                    value = _scaled(value, factor, name)
                rec[name] = value
            if not (isinstance(rec.get("report_file"), str) and rec["report_file"].strip()) and i in self.reports:
                rec["report_file"] = str(self.reports[i])
            out.append(rec)
        return out

    def report_dates(self) -> list[ReportDates]:
        """Each row's 报告期 and 公告日期 from its own columns (``periods.from_cells``)."""
        def cell(row: list[Any], name: str) -> Any:
            idx = self.mapping.get(name)
            return row[idx] if idx is not None and idx < len(row) else None

        heads = {name: self.columns[self.mapping[name]] if name in self.mapping else name for name in DATE_FIELDS}
        return [from_cells(cell(row, "period"), cell(row, "published"), heads["period"], heads["published"])
                for row in self.rows]

    def published_cell(self, i: int) -> Any:
        """Row ``i``'s 公告日期 cell as given (``None`` without the column)."""
        idx = self.mapping.get("published")
        return self.rows[i][idx] if idx is not None and idx < len(self.rows[i]) else None

    left_out: dict[int, list[str]] = field(default_factory=dict)  # row index → files --as-of left out, and why

    def match_reports(self, folder: str | Path, as_of: Any = None, texts: Any = None) -> int:
        """Give each row without a report file the file in ``folder`` named with its stock code (with
        ``as_of``, a date: the newest published by then, ``documents.match_reports``, its files' texts read
        by ``texts``); returns how many rows got one."""

        codes: dict[int, str] = {}
        idx = self.mapping["code"]
        for i, row in enumerate(self.rows):
            try:
                codes[i] = normalize_code(row[idx] if idx < len(row) else None)
            except InputError:
                continue  # the row's own error names its code
        left: dict[str, list[str]] = {}
        found = match_reports(list(codes.values()), Path(folder).expanduser().resolve(),  # no '..' in its paths
                              as_of, left, texts)
        self.reports = {i: found[c[:6]] for i, c in codes.items() if c[:6] in found}
        self.left_out = {i: left[c[:6]] for i, c in codes.items() if c[:6] in left}
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
                elif _PLAIN_NUMBER.match(value.strip()) and len(value.strip()) <= 15:  # an 18-digit ID stays text
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


def pool_from_table(header: list[Any], rows: list[list[Any]], path: Path,
                    required: tuple[str | tuple[str, ...], ...] = REQUIRED) -> Pool:
    """The pool of a table; ``required``: the fields it must have (a tuple: one of them). A pool that need
    not name its companies (``NOTES_REQUIRED``) and has no code column gets its rows numbered."""
    columns = [("" if h is None else str(h)).strip() for h in header]
    rows = [r[: len(columns)] if len(r) > len(columns) and is_empty_row(r[len(columns) :]) else r for r in rows]
    wider = max((len(r) for r in rows), default=0)
    if wider > len(columns):  # cells beyond the header (a text with an unquoted comma): kept, in columns
        columns += [f"(第{j + 1}列)" for j in range(len(columns), wider)]  # of their own, never lost or a crash
    pool = Pool(path, columns, rows)
    for i, col in enumerate(columns):
        m = match_header(col)
        if m and m[0] in pool.mapping:
            first = columns[pool.mapping[m[0]]]
            raise InputError("columns", f"{first!r} and {col!r} in {path.name} both hold {m[0]}: keep one of them "
                             "(or rename the other)")
        if m:
            pool.mapping[m[0]] = i
            pool.scale[m[0]] = m[1]
    for need in required:
        names = (need,) if isinstance(need, str) else need
        if not any(name in pool.mapping for name in names):
            known = "/".join(alias for name in names for alias in FIELD_ALIASES[name][:4])
            raise InputError("columns", f"have no {' or '.join(names)} column in {path.name} (expected one of "
                             f"{known}); found: " + ", ".join(columns))
    if "code" not in pool.mapping and "code" not in required:
        pool.columns = [ROW_NUMBER, *columns]
        pool.rows = [[i, *row] for i, row in enumerate(rows, 1)]
        pool.mapping = {name: i + 1 for name, i in pool.mapping.items()}
    return pool


def pool_from_frame(df: Any, source: str = "DataFrame", required: tuple[str | tuple[str, ...], ...] = REQUIRED) -> Pool:
    """A pandas DataFrame as a pool: its columns are the header, missing values (NaN, NaT, None)
    are blanks."""
    cells = df.astype(object).where(df.notna(), None)
    return pool_from_table(list(df.columns), cells.values.tolist(), Path(source), required)


def read_pool(path: str | Path, required: tuple[str | tuple[str, ...], ...] = REQUIRED) -> Pool:
    path = Path(path)
    if not path.is_file():
        raise InputError("input", f"file not found: {path}")
    suffix = path.suffix.lower()
    unsaved = 0
    if suffix in (".xlsx", ".xlsm"):
        table, unsaved = _read_xlsx(path)
    elif suffix in (".csv", ".txt", ".tsv"):
        table = _read_csv(path)
    elif suffix == ".xls":
        table = _read_xls(path)
    else:
        raise InputError("input", f"{path.name}: expected a .csv, .txt, .xls or .xlsx file")
    table = [r for r in table if not is_empty_row(r)]
    if not table:
        raise InputError("input", f"{path.name} is empty")
    at = _header_row(table)
    rows, notes = _without_notes(table[at + 1 :])
    pool = pool_from_table(table[at], rows, path, required)
    pool.skipped = [" ".join(str(v) for v in r if v not in (None, "")) for r in table[:at]] + notes
    if unsaved:
        pool.skipped.append(f"{unsaved} formula cells have no saved value (read as blanks): open {path.name} in "
                            "Excel or Calc and save it, so their values are stored")
    totals = _totals(pool)
    if totals:
        pool.rows = [r for i, r in enumerate(pool.rows) if i not in totals]
        pool.skipped.extend(f"合计行 (not a stock): {totals[i]}" for i in sorted(totals))
    return pool


_TOTAL = re.compile(r"^(?:合计|总计|小计|总和|平均值?|均值|中位数|汇总|total|sum|average|mean|median)[:：]?$", re.I)


def _totals(pool: Pool) -> dict[int, str]:
    """The rows of ``pool`` that are a table's totals (合计, 平均值 …: in the code cell, or in the name cell
    with no code), each as its filled cells: not a stock, passed over and said."""
    code, name = pool.mapping.get("code"), pool.mapping.get("name")
    out = {}
    for i, row in enumerate(pool.rows):
        cell = row[code] if code is not None and code < len(row) else None
        named = row[name] if name is not None and name < len(row) else None
        word = cell if cell not in (None, "") else named
        if isinstance(word, str) and _TOTAL.match(word.strip()):
            out[i] = " ".join(str(v) for v in row if v not in (None, ""))[:80]
    return out


def _header_row(table: list[list[Any]]) -> int:
    """The header: the first of the first rows that names a code and a name column (a title line above
    it, as terminals write one, is skipped); else the first row."""
    for i, row in enumerate(table[:10]):
        found = set()
        for cell in row:
            try:
                m = match_header(cell)
            except InputError:
                m = ("?", 1.0)  # a recognised column with a bad unit: this is the header; the error comes later
            if m:
                found.add(m[0])
        if {"code", "name"} <= found or ("?" in found and len(found) > 1):
            return i
    return 0


_NOTE = re.compile(r"^\s*(数据来源|来源|资料来源|注|说明|备注|制表|source|note)\s*[:：]", re.IGNORECASE)


def _without_notes(rows: list[list[Any]]) -> tuple[list[list[Any]], list[str]]:
    """The table's rows without the notes terminals write below it (``数据来源：Wind``): a row whose only
    filled cell is such a note."""
    notes = []
    while rows:
        filled = [v for v in rows[-1] if v not in (None, "")]
        if len(filled) == 1 and isinstance(filled[0], str) and _NOTE.match(filled[0]):
            notes.insert(0, filled[0].strip())
            rows = rows[:-1]
        else:
            break
    return rows, notes


def _decoded(path: Path) -> str:
    return decode_text(path.read_bytes(), path.name, "input")


def _read_csv(path: Path) -> list[list[Any]]:
    text = _decoded(path)
    dialect = "excel-tab" if path.suffix.lower() == ".tsv" else _sniff(text)
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)
    reader = csv.reader(io.StringIO(text, newline=""), dialect=dialect)
    try:
        return [list(r) for r in reader]
    except csv.Error as e:
        raise InputError("input", f"{path.name} line {reader.line_num}: {e}") from None


def _read_xls(path: Path) -> list[list[Any]]:
    """A ``.xls``: the binary Excel 97-2003 kind (xlrd), or — as some terminals save under that name —
    an HTML table or tab-separated text."""
    head = path.read_bytes()[:2048]
    if head.startswith(b"\xd0\xcf\x11\xe0"):  # an OLE2 compound file: a real .xls
        import xlrd

        try:
            book = xlrd.open_workbook(str(path), formatting_info=True)
            sheet = book.sheet_by_name("Pool") if "Pool" in book.sheet_names() else book.sheet_by_index(0)
            return [[_xls_value(sheet.cell(r, c), book) for c in range(sheet.ncols)] for r in range(sheet.nrows)]
        except (xlrd.XLRDError, IndexError, ValueError, AssertionError, KeyError) as e:
            raise InputError("input", f"{path.name} is not a readable .xls workbook ({e.__class__.__name__}: "
                             f"{str(e)[:120]})") from None
    lowered = head.lstrip(b"\xef\xbb\xbf").lstrip().lower()
    if lowered.startswith((b"<", b"\xff\xfe<", b"\xfe\xff")) and b"<t" in head.lower().replace(b"\x00", b""):
        return _html_table(path)
    return _read_csv(path)  # tab-separated text named .xls


def _xls_value(cell: Any, book: Any) -> Any:
    import xlrd

    if cell.ctype == xlrd.XL_CELL_EMPTY:
        return None
    if cell.ctype == xlrd.XL_CELL_NUMBER:
        value = cell.value
        fmt = book.format_map.get(book.xf_list[cell.xf_index].format_key) if book.formatting_info else None
        if fmt is not None and percent_format(fmt.format_str):
            return round(value * 100, 10)
        return int(value) if value.is_integer() and abs(value) < 1e15 else value
    if cell.ctype == xlrd.XL_CELL_BOOLEAN:
        return bool(cell.value)
    return cell.value


class _Cells(html.parser.HTMLParser):
    """The table rows of an HTML page, cell by cell."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th") and self.rows:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _html_table(path: Path) -> list[list[Any]]:
    parser = _Cells()
    parser.feed(_decoded(path))
    return [r for r in parser.rows if r]


def _sniff(text: str) -> Any:
    """The CSV dialect of ``text``: comma, semicolon or tab, whichever most of its first lines use (a
    title line above the table uses none; a tie goes to tab, then semicolon, as a comma also sits in
    numbers)."""
    lines = text.splitlines()[:30]
    best = max(("\t", ";", ","), key=lambda d: sum(d in line for line in lines))
    return "excel-tab" if best == "\t" else type("Semicolon", (csv.excel,), {"delimiter": ";"}) if best == ";" \
        else "excel"


def _read_xlsx(path: Path) -> tuple[list[list[Any]], int]:
    """The cells of the pool's sheet (``Pool``, else the first; a merged cell's value in every cell it covers)
    and how many are formulas saved without their values."""
    import zipfile
    import zlib
    from xml.etree.ElementTree import ParseError

    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    with path.open("rb") as f:
        if f.read(8) == _OLE:  # Office's encrypted package: a password-protected workbook
            raise InputError("input", f"{path.name} is password-protected (encrypted): save a copy without a "
                             "password (File ▸ Info ▸ Protect Workbook ▸ Encrypt with Password: clear it)")
    whole = _sheets_bytes(path) <= WHOLE_XLSX_BYTES  # merged cells are known only to a workbook read whole
    try:
        wb = openpyxl.load_workbook(path, read_only=not whole, data_only=True)
    except (zipfile.BadZipFile, InvalidFileException, KeyError, ValueError, OSError, EOFError, zlib.error,
            ParseError, IndexError, TypeError) as e:
        raise InputError("input", f"{path.name} is not a readable .xlsx workbook ({e.__class__.__name__}: "
                         f"{str(e)[:120]})") from None
    try:
        if not wb.worksheets:
            raise InputError("input", f"{path.name} has no worksheet")
        ws = wb["Pool"] if "Pool" in wb.sheetnames else wb.worksheets[0]
        table = [[_cell_value(c) for c in r] for r in ws.iter_rows()]
        for merged in getattr(ws, "merged_cells", None) and ws.merged_cells.ranges or ():  # an industry merged
            top = table[merged.min_row - 1][merged.min_col - 1]  # over rows: every row of it holds it
            for r in range(merged.min_row - 1, min(merged.max_row, len(table))):
                for c in range(merged.min_col - 1, min(merged.max_col, len(table[r]))):
                    table[r][c] = top
        sheet = ws.title
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError, zlib.error, ParseError, IndexError,
            TypeError) as e:
        raise InputError("input", f"{path.name}: cannot read its cells ({e.__class__.__name__}: {str(e)[:120]})") \
            from None
    finally:
        wb.close()
    unsaved = _formulas_without_values(path, sheet, table) if whole and any(
        v is None for row in table for v in row) and _has_formulas(path) else 0
    return table, unsaved


def _sheets_bytes(path: Path) -> int:
    """The bytes its worksheets' XML takes unpacked (the zip's own record: nothing is unpacked to know it), or
    more than any bound when it cannot be told: a small file that unpacks to gigabytes is never read whole."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return sum(i.file_size for i in z.infolist() if i.filename.startswith("xl/worksheets/"))
    except (zipfile.BadZipFile, OSError):
        return WHOLE_XLSX_BYTES + 1


def _has_formulas(path: Path) -> bool:
    """Whether a worksheet of the workbook holds a formula (a ``<f>`` in its XML): most pools hold none, and
    are not read a second time for them."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.startswith("xl/worksheets/") and name.endswith(".xml"):
                    xml = z.read(name)
                    if b"<f>" in xml or b"<f " in xml:
                        return True
    except (zipfile.BadZipFile, OSError, KeyError):
        return False
    return False


_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # a compound file's signature: an encrypted .xlsx is one
WHOLE_XLSX_BYTES = 64 * 2**20  # a workbook whose sheets unpack to this is read whole (merged cells, formulas)


def _formulas_without_values(path: Path, sheet: str, table: list[list[Any]]) -> int:
    """How many of ``table``'s blank cells are formulas whose values the file does not hold (a workbook saved by
    a program that does not compute them): read as blanks, and said."""
    import openpyxl

    try:
        wb = openpyxl.load_workbook(path, read_only=True, data_only=False)
    except Exception:  # read once already: a second look that fails says nothing
        return 0
    try:
        n = 0
        for r, row in enumerate(wb[sheet].iter_rows(values_only=True)):
            for c, value in enumerate(row):
                if isinstance(value, str) and value.startswith("=") and r < len(table) and c < len(table[r]) \
                        and table[r][c] is None:
                    n += 1
        return n
    finally:
        wb.close()


_LITERAL = re.compile(r'"[^"]*"|\\.')  # quoted text and escaped characters of a number format


def percent_format(number_format: str | None) -> bool:
    """Whether a cell's number format shows the value as a percentage (``0.00%``), not one that only
    writes a percent sign after it (``0.00"%"``, ``0.00\\%``)."""
    return "%" in _LITERAL.sub("", number_format or "")


def _cell_value(cell: Any) -> Any:
    """A cell's value as the user sees it: a percent-formatted 0.3419 is 34.19 (percent points); a
    format that only writes a percent sign after the value (``0.00"%"``, ``0.00\\%``) shows it as it is."""
    value = getattr(cell, "value", None)
    if isinstance(value, int | float) and not isinstance(value, bool) and percent_format(cell.number_format):
        return round(value * 100, 10)
    return value


# Parsing of spreadsheet values into clean input fields.
#
# Excel and CSV hand us numbers as floats, strings with ``%`` or thousands
# separators, full-width digits, placeholders such as ``N/A`` or ``--``, and
# stock codes that lost their leading zeros. Every parser here either returns a
# clean value (``None`` for a missing one) or raises ``InputError`` naming the field.

MISSING_TOKENS = frozenset({"", "n/a", "na", "nan", "none", "null", "-", "--", "---", "—", "——", "#n/a", "无", "暂无"})
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(?:(,)\d{3}(?:\1\d{3})*|( )\d{3}(?:\2\d{3})*)(\.\d+)?%?$")
# Larger than any figure a stock pool holds (1e15 亿元 is a thousand times world GDP): past this a
# value is a typo or a placeholder, and it would overflow the exact decimal arithmetic of the rules.
MAX_ABS = 1e15

# Exchange by the leading digits of a six-digit A-share (or B-share) code.
EXCHANGE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("60", "SH"), ("68", "SH"), ("90", "SH"),
    ("00", "SZ"), ("30", "SZ"), ("20", "SZ"),
    ("43", "BJ"), ("83", "BJ"), ("87", "BJ"), ("88", "BJ"), ("92", "BJ"),
)
_ST_NAME = re.compile(r"^(\*|S\*?)?ST")
_SUFFIXES = {"SH": "SH", "SS": "SH", "SZ": "SZ", "BJ": "BJ"}


def text_or_none(value: Any) -> str | None:
    """Normalise a cell to stripped NFKC text; ``None`` when blank or a placeholder."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    text = unicodedata.normalize("NFKC", str(value)).strip()
    return None if text.lower() in MISSING_TOKENS else text


def required_text(value: Any, field: str, missing: str = "is empty") -> str:
    """Like ``text_or_none``, but a blank is an ``InputError`` naming the field."""
    text = text_or_none(value)
    if text is None:
        raise InputError(field, missing)
    return text


def parse_number(value: Any, field: str) -> float | None:
    """A finite number, or ``None`` when missing. ``"32.78%"`` → 32.78, ``"1,234.5"`` → 1234.5."""
    if isinstance(value, bool):
        raise InputError(field, f"is not a number: {value!r}")
    if isinstance(value, int | float):
        if isinstance(value, float) and math.isnan(value):
            return None
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float
            number = math.inf
        return _bounded(number, value, field)
    text = text_or_none(value)
    if text is None:
        return None
    cleaned = text.replace(",", "").replace(" ", "").removesuffix("%")
    if not _NUMBER.match(cleaned):
        raise InputError(field, f"is not a number: {shown(text)!r}")
    if ("," in text or " " in text) and not _GROUPED.match(text):
        # "12,5" is 12.5 in many locales and 125 in none: never guess
        raise InputError(field, f"is ambiguous: {shown(text)!r} (a comma or space only separates thousands, in "
                         "groups of three: write 12.5 or 1,234.5)")
    return _bounded(float(cleaned), text, field)


def shown(text: str, limit: int = 40) -> str:
    """``text`` cut for an error message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded(number: float, given: Any, field: str) -> float:
    if math.isinf(number):
        raise InputError(field, f"is not a finite number: {shown(str(given))!r}")
    if abs(number) >= MAX_ABS:
        raise InputError(field, f"is out of range: {shown(str(given))!r} (|value| must be below {MAX_ABS:.0e})")
    return number


def parse_flag(value: Any, field: str) -> bool | None:
    """Yes/no cells: TRUE/FALSE, 1/0, 是/否, Y/N, ST/blank."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and not (isinstance(value, float) and math.isnan(value)):
        if value in (0, 1):
            return bool(value)
        raise InputError(field, f"is not a yes/no value: {value!r}")
    text = text_or_none(value)
    if text is None:
        return None
    low = text.lower()
    if low in {"true", "1", "yes", "y", "是", "st", "*st", "1.0"}:
        return True
    if low in {"false", "0", "no", "n", "否", "0.0"}:
        return False
    raise InputError(field, f"is not a yes/no value: {text!r}")


def normalize_code(value: Any, field: str = "code") -> str:
    """``600519`` → ``600519.SH``; ``1`` (Excel dropped the zeros) → ``000001.SZ``; ``SH600519`` too."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = text_or_none(value)
    if text is None:
        raise InputError(field, "is missing")
    raw = re.sub(r"^(\d{1,6})\.0+$", r"\1", text.upper().replace(" ", ""))  # 600519.0: a number's text
    exchange = None
    m = re.fullmatch(r"(SH|SZ|BJ|SS)?(\d{1,6})(?:\.(SH|SZ|BJ|SS))?", raw)
    if not m or (m.group(1) and m.group(3)):
        raise InputError(field, f"is not an A-share code: {text!r} (expected e.g. 600519 or 600519.SH)")
    digits = m.group(2).zfill(6)
    given = m.group(1) or m.group(3)
    for prefix, ex in EXCHANGE_PREFIXES:
        if digits.startswith(prefix):
            exchange = ex
            break
    if given:
        given = _SUFFIXES[given]
        if exchange is not None and given != exchange:
            raise InputError(field, f"{text!r}: {digits} trades on {exchange}, not {given}")
        exchange = given
    if exchange is None:
        raise InputError(field, f"{text!r}: cannot tell the exchange of {digits}; write it as {digits}.SH/.SZ/.BJ")
    return f"{digits}.{exchange}"


def is_st_name(name: str | None) -> bool:
    """ST, *ST and S*ST names (full-width letters too)."""
    if not name:
        return False
    return _ST_NAME.match(unicodedata.normalize("NFKC", name).upper().replace(" ", "")) is not None


# a sentence: up to and including its end mark, or the text's last words without one
_SENTENCE = re.compile(r"[^。！？；;!?\n]*[。！？；;!?\n]|[^。！？；;!?\n]+\Z")
_DIGIT = re.compile(r"\d")


def trim_text(text: str, limit: int) -> tuple[str, bool]:
    """Fit ``text`` into ``limit`` characters: keep the head (60% of the budget),
    then the later sentences that contain digits, in order, while they fit."""
    if len(text) <= limit:
        return text, False
    head = text[: int(limit * 0.6)]
    budget = limit - len(head) - 1
    sentences = _SENTENCE.finditer(text, len(head))
    next(sentences, None)  # drop the sentence the head cut through
    kept: list[str] = []
    for m in sentences:  # a sentence too long for what is left is passed by its length, never copied
        if budget < 4:
            break
        if m.end() - m.start() <= budget and _DIGIT.search(text, m.start(), m.end()):
            kept.append(m.group())
            budget -= m.end() - m.start()
    return head + "…" + "".join(kept), True
