"""The key-figure tables of an annual report, read by code: 主要会计数据 and 主要财务指标.

In a report's text (a PDF's text layer, page by page) a table row is its label — often wrapped
over two or three lines (``归属于上市公司股东`` / ``的净利润``) — followed by its cells: this
year, last year, the change, the year before. The unit is the table's own line (``单位：元``). Each
figure comes with its row as printed (label joined, cells as written) and its page, so a search in
the document finds it.
"""

from __future__ import annotations

import ast
import functools
import re
import unicodedata
from dataclasses import dataclass

PAGE_BREAK = "\f"
_START = re.compile(r"主要会计数据")
_END = re.compile(r"境内外会计准则|分季度主要财务|非经常性损益项目|第[三四]节")
_UNIT = re.compile(r"单位[:：]\s*(人民币)?(元|千元|万元|百万元|亿元)")
MONEY_UNITS: dict[str, float] = {"元": 1e-8, "千元": 1e-5, "万元": 1e-4, "百万元": 1e-2, "亿元": 1.0}  # → 亿元
_YEAR = re.compile(r"^(19|20)\d{2}年(末|度)?$")
_CELL = re.compile(r"^(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)%?$")
_PP = re.compile(r"^(增加|减少|上升|下降)?(-?\d+(?:\.\d+)?)个?百分点$")
_UNIT_SUFFIX = re.compile(r"[(（](元|元/股|%|千元|万元|百万元|亿元)[)）]$")
# name → (label pattern matched at the end of the row's label, words that make it another row)
ROWS: dict[str, tuple[str, str]] = {
    "revenue": (r"营业总收入|营业收入", r"扣除|营业外"),
    "net_profit": (r"归属于(?:上市公司|母公司)(?:股东|所有者)的净利润", r"扣除|少数"),
    "net_profit_deducted": (r"归属于(?:上市公司|母公司)(?:股东|所有者)的扣除非经常性损益(?:后)?的净利润", r"少数"),
    "operating_cash_flow": (r"经营活动产生的现金流量净额", r"每股"),
    "eps": (r"基本每股收益", r"扣除|稀释"),
    "roe": (r"加权平均净资产收益率", r"扣除"),
}
PERCENT_ROWS = ("roe",)
PER_SHARE_ROWS = ("eps",)


@dataclass(frozen=True)
class TableRow:
    """One figure of a key-figure table: this year, last year and the stated change (percent, or
    percent points for a ratio), in 亿元 for money, with the row as printed and its page."""

    name: str
    current: float | None
    prior: float | None
    change: float | None
    quote: str
    page: int | None
    unit: str


def page_of(text: str, position: int) -> int | None:
    """The page (from 1) of ``position`` in a document's text, or ``None`` for a text without pages."""
    if PAGE_BREAK not in text:
        return None
    return text.count(PAGE_BREAK, 0, position) + 1


def _norm(s: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", s))


def _fold(tok: str) -> str:
    return tok if tok.isascii() else unicodedata.normalize("NFKC", tok)


def _cells(tokens: list[str]) -> int:
    """How many of the last tokens are table cells."""
    n = 0
    for tok in reversed(tokens):
        t = _fold(tok)
        if _CELL.match(t) or _PP.match(t) or t in ("-", "--", "不适用"):
            n += 1
        else:
            break
    return n


def _number(tok: str) -> float | None:
    t = _fold(tok)
    if (m := _CELL.match(t)) is not None:
        return float(m.group(1).replace(",", ""))
    if (m := _PP.match(t)) is not None:
        value = float(m.group(2))
        return -value if m.group(1) in ("减少", "下降") else value
    return None


@functools.lru_cache(maxsize=2048)  # small results, one per row in flight (figures.ROWS_IN_FLIGHT)
def read_tables(text: str) -> dict[str, TableRow]:
    """The key figures of the report's 主要会计数据 / 主要财务指标 tables (first row of each wins)."""
    if "主要会计数据" not in text and "主要财务指标" not in text:
        return {}
    out: dict[str, TableRow] = {}
    for page_no, page in enumerate(text.split(PAGE_BREAK), start=1):
        if "主要会计数据" not in page and "主要财务指标" not in page and not out:
            continue
        _read_page(page, page_no if PAGE_BREAK in text else None, out)
        if len(out) == len(ROWS):
            break
    return out


def _read_page(page: str, page_no: int | None, out: dict[str, TableRow]) -> None:
    inside, unit, label = bool(out), "元", []
    for raw in page.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if _START.search(line) and not _cells(line.split()):
            inside, label = True, []
        if not inside:
            continue
        if _END.search(line):
            if out:
                return
            inside, label = False, []
            continue
        if "单位" in line and (m := _UNIT.search(_norm(line))) is not None:
            unit, label = m.group(2), []
            continue
        if line.startswith("['") and line.endswith("']"):  # a table row as a parsed report lists its cells
            listed = _listed(line)
            if listed is not None:
                head, cells = listed[0], [c for c in listed[1:] if c]
                if not head and any(_YEAR.match(_fold(c)) for c in cells):
                    label = []
                elif head and len(cells) >= 2 and _cells(cells) == len(cells):
                    _take(out, _norm(head), cells, line, unit, page_no, quote=line)  # the row as it stands
                continue
        tokens = line.split()
        n = _cells(tokens)
        if "年" in line and any(_YEAR.match(_fold(t)) for t in tokens):
            label = []  # a header row (2019年 2018年 …)
            continue
        if n < 2:
            label.append(line)
            continue
        label.append(" ".join(tokens[: len(tokens) - n]))
        name_text = "".join(label)
        _take(out, _norm(name_text), tokens[len(tokens) - n :], name_text, unit, page_no)
        label = []


def _listed(line: str) -> list[str] | None:
    try:
        value = ast.literal_eval(line)
    except (ValueError, SyntaxError):
        return None
    return [str(v).strip() for v in value] if isinstance(value, list) and value else None


def _take(out: dict[str, TableRow], label: str, cells: list[str], printed: str, unit: str,
          page_no: int | None, quote: str | None = None) -> None:
    own = _UNIT_SUFFIX.search(label)
    if own is not None and own.group(1) in MONEY_UNITS:  # 营业收入（元）: the row's own unit
        unit = own.group(1)
    label = _UNIT_SUFFIX.sub("", label)
    for name, (pattern, other) in ROWS.items():
        m = re.search(f"(?:{pattern})$", label)
        if m is None or name in out or re.search(other, label[: m.start()]):
            continue
        values = [_number(c) for c in cells]
        scale = 1.0 if name in PERCENT_ROWS or name in PER_SHARE_ROWS else MONEY_UNITS[unit]
        shown_unit = "%" if name in PERCENT_ROWS else "元/股" if name in PER_SHARE_ROWS else "亿元"

        def scaled(v: float | None, factor: float = scale) -> float | None:
            return None if v is None else round(v * factor, 10)

        change = values[2] if len(values) > 2 else None
        out[name] = TableRow(name, scaled(values[0]), scaled(values[1]), change,
                             quote or f"{printed.strip()} {' '.join(cells)}", page_no, shown_unit)
        return
