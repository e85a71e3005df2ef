"""The key-figure tables of an annual report, read by code: 主要会计数据 and 主要财务指标, and the
合并利润表's 营业收入 and 营业成本 (gross margin this year and last).

In a report's text (a PDF's text layer, page by page) a table row is its label — often wrapped
over two or three lines (``归属于上市公司股东`` / ``的净利润``), the numbers on the first, middle or
last line — followed by its cells: this year, last year (with a restated report 调整前 and 调整后),
the change, the year before. The unit is the table's own line (``单位：元``), a group header
(``经营业绩（人民币百万元）``) or the row's label (``营业收入（元）``); a table may go on over the next
page. Each figure comes with its row as printed (label joined, cells as written) and its page, so a
search in the document finds it.

Never a guess: a row whose columns cannot be placed (which is this year, which is restated) or whose
unit is not stated is left out with the reason (``KeyTables.withheld``), never read approximately.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from dataclasses import dataclass, field, replace

from .document import read_once

PAGE_BREAK = "\f"
PIPE = "|"  # a table row read by its cells: ``| 营业收入 | 1,234.56 | 1,100.00 | 12.23 |`` (reading/layout.py)
# the pre-2007 template's one-year table (this year's figures only, one column: 项目 金额), before its
# three-year table (截至报告期末公司前三年的主要会计数据和财务指标)
_ONE_YEAR = r"本年度(?:主要)?(?:财务数据|利润指标|会计数据|财务指标)"
_START = re.compile(r"主要会计数据|" + _ONE_YEAR)
_ONE_YEAR_TITLE = re.compile(_ONE_YEAR)
_ONE_YEAR_HEAD = re.compile(r"^(?:(?:项目|指标|项目名称)(?:本年度|本年|本期|报告期)(?:金额|数额|数)?"
                            r"|(?:项目|指标|项目名称)?(?:本年度|本年|本期|报告期)?(?:金额|数额))"
                            r"(?:[(（](?:单位[:：])?(?:人民币)?(元|千元|万元)[)）])?$")  # 项 目 金 额, 金额（元）
_END = re.compile(r"境内外会计准则|分季度|非经常性损益项目|股东权益变动情况|第[三四]节|第[三四]章")
_YEARS_TITLE = re.compile(r"(?:前|近)[三五]年.*(?:会计数据|财务指标|财务数据)")
_SENTENCE = re.compile(r"[，。；：,;:]")  # a note's words, not a header's
# a numbered line that titles a table (二、截至报告期末公司前三年的主要会计数据和财务指标, （1） 近三年…)
_NUMBERED = re.compile(r"^(?:[一二三四五六七八九十]+[、.．]|[(（][一二三四五六七八九十\d]+[)）]|\d+[、．])")
_UNIT = re.compile(r"单位[:：]\s*(人民币)?(元|千元|万元|百万元|亿元)")
# a line that is only a unit (``元`` right-aligned above a 年度报告摘要's table), its 币种 perhaps beside it
_BARE_UNIT = re.compile(r"^(?:人民币)?(元|千元|万元|百万元|亿元)(?:币种[:：]?人民币)?$")
MONEY_UNITS: dict[str, float] = {"元": 1e-8, "千元": 1e-5, "万元": 1e-4, "百万元": 1e-2, "亿元": 1.0}  # → 亿元
# a group header's unit: 经营业绩（人民币百万元）, 规模指标（人民币千元）
_GROUP_UNIT = re.compile(r"[(（](人民币)?(元|千元|万元|百万元|亿元)[)）]")
_YEAR_IN = re.compile(r"(?:19|20)\d{2}年")
_YEAR = re.compile(r"^(19|20)\d{2}年(末|度)?$")
_CELL = re.compile(r"^([-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[-+]?\d+(?:\.\d+)?)%?$")  # +1.51: a rise, signed
_PAREN = re.compile(r"^[(（](\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)%?[)）]$")  # (344,587), (10.9%): a negative
# a change in percent points, in words: 增加3.88个百分点, 减少 3.96 个百分点 (joined first), 增加3.88 (wrapped)
_PP = re.compile(r"^(增加|减少|上升|下降)?([-+]?\d+(?:\.\d+)?)(个百分点|百分点|个)?$")
_PP_SPACED = re.compile(r"(增加|减少|上升|下降)\s*(\d+(?:\.\d+)?)\s*(个\s*百分点|百分点|个)?"
                        r"|(?<![\d.,])[-+]?\d+(?:\.\d+)?\s+(?:个\s*百分点|百分点)")  # -1.30 个百分点, +1.51 个百分点
_WORDS = ("-", "--", "–", "—", "——", "不适用", "上年同期为负", "本期为负", "上年为负", "/", "N/A", "n/a")
_UNIT_SUFFIX = re.compile(r"[(（](?:人民币)?(元|元/股|%|千元|万元|百万元|亿元)[)）]$")
# another currency than 人民币 (a B-share's 美元 or 港元 figures, an H-share's 港币): recognised, never converted
_FOREIGN = re.compile(r"港元|港币|美元|HK\$|US\$|HKD|USD")
_FOREIGN_GROUP = re.compile(r"[(（](?:单位[:：])?(?:港币|港元|美元|HK\$|US\$)(?:千元|万元|百万元|亿元|元|千|百万)?[)）]"
                            r"|[(（](?:千|万|百万|亿)?(?:港元|美元)[)）]")
_FOREIGN_SUFFIX = re.compile(r"[(（](?:千|万|百万|亿)?(?:港元|港币|美元)(?:千元|万元|百万元|元)?(?:/股)?[)）]$")


def currency_of(norm: str) -> str:
    """The currency a unit or 币种 names: ``HKD``, ``USD`` or ``CNY``."""
    m = _FOREIGN.search(norm)
    if m is None:
        return "CNY"
    return "USD" if m.group(0) in ("美元", "US$", "USD") else "HKD"
_RESTATED = ("调整前", "调整后")
_CHANGE_WORDS = re.compile(r"增减|变动|比上年|同比")
# where a change column's words begin in a header (本年比上年增减, 本报告期比 / 上年同期, 增减(%))
_CHANGE_START = re.compile(r"本(?:报告)?(?:年|期)末?比|比上年|增减|变动|同比")
# name → (label pattern matched at the end of the row's label, words that make it another row)
_OWNER = r"归属于(?:上市公司|母公司|本行|本公司)(?:普通股)?(?:股东|所有者)的?"  # 的 left out too
ROWS: dict[str, tuple[str, str]] = {
    "revenue": (r"营业总收入|营业收入|营业净收入|主营业务收入", r"扣除|营业外"),  # 营业净收入: a bank's, 2013
    "net_profit": (_OWNER + r"净利润", r"扣除|少数"),
    "net_profit_deducted": (_OWNER + r"扣除非经常性损益(?:后)?的净利润|扣除非经常性损益后的?" + _OWNER + r"净利润",
                            r"少数"),
    "operating_cash_flow": (r"经营活动(?:产生的)?现金流量净额", r"每股"),
    "eps": (r"基本每股收益", r"扣除|稀释"),
    "roe": (r"加权平均净资产收益率|净资产收益率[(（]加权平均[)）]", r"扣除"),
}
# the pre-2007 template's labels, each taken only where the table has no row of the label above (``ROWS``):
# 净利润 without 归属于 (the company's own before 2007: minority interests were deducted above it), 扣除非经常性
# 损益后的净利润, 每股收益 plain or 全面摊薄 (no 基本), 净资产收益率 全面摊薄 (where no 加权平均 is given)
FALLBACK_ROWS: dict[str, tuple[str, str]] = {
    # an insurer's 保险业务收入 (its premiums) only where its table prints no 营业收入 row
    "revenue": (r"保险业务收入", r""),
    "net_profit": (r"^(?:[一二三四五六七八九十\d]+[、.．])?净利润", r""),
    "net_profit_deducted": (r"扣除非经常性损益(?:后)?的净利润", r"少数|每股|收益率"),
    "eps": (r"每股收益|每股收益[(（]全面摊薄[)）]|全面摊薄每股收益", r"扣除|稀释|加权"),
    "roe": (r"净资产收益率[(（]全面摊薄[)）]|全面摊薄净资产收益率|^净资产收益率", r"扣除"),
}
PERCENT_ROWS = ("roe",)
PER_SHARE_ROWS = ("eps",)
# words of a bank's (or an insurer's) key figures: its income statement has no 营业成本, so no gross margin
_BANK = re.compile(r"利息净收入|归属于本行|净息差|不良贷款率|已赚保费|保险业务收入")


def unit_line(line: str, norm: str) -> str | None:
    """The unit a table's 单位 / 币种 line (``norm``: it normalised) states: a 人民币 unit (元 … 亿元, a
    ``MONEY_UNITS`` key), or the currency code of another (``HKD``, ``USD``: 单位：港币千元, 币种：美元);
    ``None`` for a line that states none."""
    if "单位" not in line and "币种" not in line:
        return None
    if (currency := currency_of(norm)) != "CNY":
        return currency
    m = _UNIT.search(norm) if "单位" in line else None
    return m.group(2) if m is not None else bare_unit(norm)


def bare_unit(norm: str) -> str | None:
    """The unit of a line that is only one (``元``, ``万元``, ``元 币种：人民币``: a 年度报告摘要 prints it alone,
    right-aligned above its table), or ``None``."""
    m = _BARE_UNIT.match(norm)
    return m.group(1) if m is not None else None


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
    currency: str = "CNY"  # another: a row in 港元 or 美元 (``KeyTables.foreign``), its values not converted
    # last year's figure from another table than this year's (the pre-2007 template: this year's from the
    # one-year table, last year's from the three-year table, the two tables agreeing on this year's)
    prior_quote: str | None = None
    prior_page: int | None = None
    # how far this year's figure may be from the same figure printed elsewhere (half its last printed digit)
    rounding: float = 0.0
    fallback: bool = False  # read under a pre-2007 label (``FALLBACK_ROWS``): gives way to the table's own
    one_year: bool = False  # from a table of this year's figures alone (its last year's may come from another)
    # its columns placed as today's template prints them (this year, last year, the change), the header's
    # order not known from its text (the change's words wrapped over lines of their own): the table read by
    # its cells, whose header places each column, stands in where it places them otherwise
    guessed: bool = False


@dataclass(frozen=True)
class Statement:
    """营业收入 and 营业成本 of the 合并利润表 (亿元), this year and last, each row as printed with its page."""

    revenue: tuple[float, float]
    cost: tuple[float, float]
    revenue_quote: str
    cost_quote: str
    revenue_page: int | None
    cost_page: int | None
    title: str = "合并利润表"  # 利润表: a company's own, where it prints no consolidated one

    def margin(self, i: int) -> float | None:
        rev, cost = self.revenue[i], self.cost[i]
        return round((rev - cost) / rev * 100, 2) if rev > 0 else None

    @property
    def quote(self) -> str:
        pages = self.revenue_page != self.cost_page and self.cost_page is not None
        return (f"{self.title} {self.revenue_quote} / {self.cost_quote}" + (f"(第{self.cost_page}页)" if pages else ""))


@dataclass
class KeyTables:
    """What code read of a report's key-figure tables and its 合并利润表, with what it left out and why."""

    rows: dict[str, TableRow] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # how a figure was placed (上年取调整后)
    withheld: dict[str, str] = field(default_factory=dict)  # name → why code leaves it empty
    statement: Statement | None = None
    foreign: dict[str, TableRow] = field(default_factory=dict)  # rows in 港元 / 美元, where no 人民币 row is read
    bank: bool = False
    found: bool = False  # a key-figure table is in the report
    named: set[str] = field(default_factory=set)  # key figures a row names by its own label (``ROWS``, not
    # ``FALLBACK_ROWS``): a fallback label gives none of them
    second: dict[str, StatementRow] = field(default_factory=dict)  # the statements' own rows (a second source)
    # a key figure of a report no table row gives (no key-figure table, or none of its rows names it), neither
    # read nor withheld: why it is missing, for the row's notes (the model may still read it)
    absent: dict[str, str] = field(default_factory=dict)


def page_of(text: str, position: int) -> int | None:
    """The page (from 1) of ``position`` in a document's text, or ``None`` for a text without pages."""
    if PAGE_BREAK not in text:
        return None
    return text.count(PAGE_BREAK, 0, position) + 1


def _norm(s: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", s))


def _fold(tok: str) -> str:
    """A token as ASCII where it can be: full-width forms folded, and the minus sign (U+2212) a hyphen."""
    return tok if tok.isascii() else unicodedata.normalize("NFKC", tok).replace("\u2212", "-")


def _is_cell(tok: str) -> bool:
    t = _fold(tok)
    return bool(_CELL.match(t) or _PAREN.match(t) or _PP.match(t)) or t in _WORDS


def _cells(tokens: list[str]) -> int:
    """How many of the last tokens are table cells."""
    n = 0
    for tok in reversed(tokens):
        if _is_cell(tok):
            n += 1
        else:
            break
    return n


def _number(tok: str) -> float | None:
    t = _fold(tok)
    if (m := _CELL.match(t)) is not None:
        return float(m.group(1).replace(",", ""))
    if (m := _PAREN.match(t)) is not None:
        return -float(m.group(1).replace(",", ""))
    if (m := _PP.match(t)) is not None:
        value = float(m.group(2))
        return -value if m.group(1) in ("减少", "下降") else value
    return None


_CHANGE_CUT = re.compile(r"(?:增加|减少|上升|下降)\s*-?\d+(?:\.\d+)?\s*(?P<cut>个百分|个百|个|百分|百)$")


def _mended(lines: list[str]) -> list[str]:
    """The lines with a change cell cut by a line break joined again: ``… 减少2.23个百`` then ``分点 6.31``
    (the last column's figure after the change's end) read as ``… 减少2.23个百分点`` and ``6.31`` on the row."""
    out = list(lines)
    for i in range(len(out) - 1):
        m = _CHANGE_CUT.search(out[i].rstrip())
        if m is None:
            continue
        rest = ("个百分点" if m["cut"].startswith("个") else "百分点")[len(m["cut"]):]
        after = out[i + 1].lstrip()
        if after.startswith(rest):
            out[i] = out[i].rstrip() + rest + " " + after[len(rest):].strip()
            out[i + 1] = ""
    return out


_TAIL = re.compile(r"\d[\d,]*\.\d+")  # a figure inside a line no cell could be split from
_GLUED = re.compile(r"(%|百分点)(?=[-\d])")  # 8.20%2,308,922,170.29: a change column too narrow for its figure


def _tokens(line: str) -> list[str]:
    """A line's tokens, a change in words joined into one (``减少 3.96 个百分点`` → ``减少3.96个百分点``), a
    percentage and the figure after it that touch split (``8.20%2,308,922,170.29``: no cell goes on after %)."""
    return _GLUED.sub(r"\1 ", _PP_SPACED.sub(lambda m: re.sub(r"\s+", "", m.group(0)), line)).split()


@read_once
def read_key_tables(text: str) -> KeyTables:
    """The key figures of the report's 主要会计数据 / 主要财务指标 tables (first row of each wins) and its
    合并利润表's revenue and cost, with the figures code leaves out and why."""
    out = KeyTables()
    if _START.search(text) or "主要财务指标" in text:
        _Reader(text, out).read()
        if PIPE in text:
            _Reader(text, out).read_cells()
    if out.found or _STATEMENT_IN.search(text):  # an annual report, or its statements without the key table
        out.bank = bool(_BANK.search(_norm(_table_text(text))))
        _read_statement(text, out)
        premiums = out.rows.get("revenue")
        if premiums is not None and premiums.fallback and "revenue" in out.second:  # an insurer's 保险业务收入:
            out.rows.pop("revenue")  # its 营业收入 is the 合并利润表's, where that prints one
    _say_absent(text, out)
    return out


# a key figure's row as the tables name it, for the reason it is missing
ROW_WORDS = {"revenue": "营业收入", "net_profit": "归属于上市公司股东的净利润",
             "net_profit_deducted": "扣除非经常性损益后的净利润", "operating_cash_flow": "经营活动产生的现金流量净额",
             "eps": "基本每股收益", "roe": "加权平均净资产收益率"}


def _say_absent(text: str, out: KeyTables) -> None:
    """Each key figure a report's tables neither give nor withhold, with the reason (``KeyTables.absent``): no
    key-figure table (in a report: a text of pages, or one naming its 年度报告), or no row of it naming the
    figure."""
    if out.found:
        page = page_of(text, m.start()) if (m := _START.search(text)) is not None else None
        where = f"(第{page}页起)" if page else ""
        why = "主要会计数据表{where}中未找到「{words}」行"
    elif PAGE_BREAK in text or "年度报告" in text:
        where, why = "", "未找到主要会计数据/主要财务指标表"
    else:
        return
    for name, words in ROW_WORDS.items():
        if name not in out.rows and name not in out.withheld and name not in out.foreign:
            out.absent[name] = why.format(where=where, words=words)


def read_tables(text: str) -> dict[str, TableRow]:
    """The key figures of the report's 主要会计数据 / 主要财务指标 tables (first row of each wins)."""
    return read_key_tables(text).rows


def _table_text(text: str) -> str:
    i = text.find("主要会计数据")
    return text[i : i + 6000] if i >= 0 else ""


class _Reader:
    """One pass over the pages from the first 主要会计数据 line to the table's end; state (unit, columns)
    carries over a page break."""

    def __init__(self, text: str, out: KeyTables):
        self.text, self.out = text, out
        self.paged = PAGE_BREAK in text
        self.inside = False
        self.unit: str | None = None
        self.label: list[str] = []
        self.years = 0  # years named in the header above the rows (the columns, with a change column)
        self.restated: list[str] | None = None  # 调整前 / 调整后 under the years, in their order
        self.pending: tuple[str, list[str], int | None, str | None] | None = None  # a row no label matched yet
        self.header = False  # the lines since the last row are a header
        # a header with a change column (本年比上年增减, 增减(%), 变动百分点) above the rows: the key-figure table
        # itself. A row read under none (an infographic page repeating the figures as a chart's labels) is
        # taken only where the table gives no such row: the table's row, with its page, replaces it.
        self.change_col = False
        # the header's columns in the order printed, each a year or ``None`` for the change (本年比上年增减),
        # where a header line names both: a bank's 2022年 2021年 2020年 本年比上年增减 puts the change last
        self.order: list[int | None] = []
        self.change_apart = False  # the change column's words on a line of no year (where it stands: unknown)
        self.guessed = False  # the last row's columns placed as today's template's, the header's order unknown
        self.change_last = False  # a money row of the table showed its change column last (``_columns``)
        self.loose: set[str] = set()  # rows (or rows withheld) read under no change column
        self.unread: dict[str, str] = {}  # key figures a line named whose figures could not be told apart: why
        self.single = False  # a one-year table (the pre-2007 template's 项目 金额): a row is one figure
        # the pre-2007 利润表附表: 净资产收益率 and 每股收益, each 全面摊薄 and 加权平均, of this year's 净利润 (and
        # other profits): the order of its two groups (``annex_groups``), then its columns (group, kind)
        self.annex_groups: list[str] | None = None
        self.annex: list[tuple[str, str]] | None = None

    def read(self) -> None:
        self._read()
        for name, why in self.unread.items():  # a figure missing says why: a line named it, no figure was read
            if name not in self.out.rows and name not in self.out.withheld:
                self.out.withheld[name] = why

    def _read(self) -> None:
        for page_no, page in enumerate(self.text.split(PAGE_BREAK), start=1):
            if not self.inside and not _START.search(page) and "主要财务指标" not in page:
                continue
            if self._page(page, page_no if self.paged else None):
                return
            firm = (self.out.rows.keys() | (self.out.withheld.keys() & ROWS.keys())) - self.loose
            if len(firm) == len(ROWS):
                return

    def _page(self, page: str, page_no: int | None) -> bool:
        """Read one page; True at the table's end."""
        for raw in _mended(page.split("\n")):
            line = raw.strip()
            if not line or _is_pipe(line):  # the tables read by their cells: read after the text (``cells``)
                continue
            if _START.search(line) and not _cells(line.split()):
                if not self.inside:
                    self.inside, self.label, self.change_col = True, [], False
                    self.out.found = True
            if not self.inside:
                continue
            if _END.search(line):
                self._settle()
                if self.out.rows.keys() - self.loose and not self._one_column():  # (a one-year table's note on its
                    return True  # 非经常性损益项目 ends it, not the three-year table after it)
                self.inside, self.label = False, []
                continue
            norm = _norm(line)
            if _PAGE_HEAD.search(norm):  # a running header or a folio (8 / 200) between a table's rows: a
                continue  # label cut by the page break goes on after it
            if self._title(norm):  # a table of its own: its unit is its own unit line's, never the last one's
                self._settle()
                self._new_table(single=bool(_ONE_YEAR_TITLE.search(norm)))
            if (stated := unit_line(line, norm) or bare_unit(norm)) is not None:  # 单位：元, 单位：港币千元, 元
                self.unit, self.label = stated, []
                continue
            if line.startswith("['") and line.endswith("']"):  # a table row as a parsed report lists its cells
                listed = _listed(line)
                if listed is not None:
                    head, cells = listed[0], [c for c in listed[1:] if c]
                    if not head and any(_YEAR.match(_fold(c)) for c in cells):
                        self.label = []
                    elif head and len(cells) >= 2 and _cells(cells) == len(cells):
                        self._take(_norm(head), cells, line, page_no, quote=line, firm=True)
                    continue
            tokens = _tokens(line)
            n = _cells(tokens)
            if n < 2 and not (n == 1 and self._one_column() and len(tokens) > 1):
                self._label_line(line, norm, tokens, page_no)
                continue
            if self.annex is not None:
                self._annex_row(norm, tokens[len(tokens) - n :], line, page_no)
                continue
            self.header, self.change_apart = False, False
            self._settle()
            self._unsplit(self.label, " ".join(tokens[: len(tokens) - n]), line, page_no, 1)
            self.label.append(" ".join(tokens[: len(tokens) - n]))
            name_text = "".join(self.label)
            self.label = []
            self._row(name_text, tokens[len(tokens) - n :], page_no)
        return False

    def read_cells(self) -> None:
        """The tables read by their cells (``reading/layout.py``: pipe rows after a page's text, each table
        after the unit lines above it): each row's figures placed by its columns' headers. A figure the
        text pass read stays the text's; one it left out or withheld is taken from here.

        A table's unit is the unit line right above it (``layout.py`` puts the lines above a table that state
        one right before its rows), or, for the page's first table going on from the page before (no
        header of its own naming a year), that table's: never a unit line of the page's text that is not
        right above it (another table's on the page, a 万元 table beside one in 元)."""
        grid, unit = None, None  # the last table's columns and unit (a table going on over a page break)
        self.dangling: tuple[str, list[str], int | None, list[_Column]] | None = None  # a table's last row,
        # its label cut by the page break (归属于上市公司股东的扣除非经常性损益 | … / 的净利润 on the next page)
        for page_no, page in enumerate(self.text.split(PAGE_BREAK), start=1):
            if PIPE not in page:
                continue
            table: list[list[str]] = []
            first = True  # the page's first table (one going on from the page before has no header)
            above: str | None = None  # the unit of the lines right above the next table
            for raw in [*page.split("\n"), ""]:
                line = raw.strip()
                if _is_pipe(line):
                    table.append([c.strip() for c in line[1:-1].split(PIPE)])
                    continue
                if table:
                    goes_on = first and not _own_header(table)
                    self.unit = above if above is not None else unit if goes_on else None
                    grid = self._table(table, grid if first else None, page_no if self.paged else None, first)
                    unit, table, first, above = self.unit, [], False, None
                norm = _norm(line)
                if (stated := unit_line(line, norm) or bare_unit(norm)) is not None:
                    above = stated
                elif line:
                    above = None

    def _table(self, rows: list[list[str]], grid: list[_Column] | None, page_no: int | None,
               first: bool) -> list[_Column] | None:
        """One table's rows: its header rows (no figure, words beside the label) make the columns, a label
        wrapped over rows of its own is joined to the row of figures it belongs to. The columns at its end."""
        header: list[list[str]] = []
        before: list[str] = []  # label lines above a row's figures
        i = 0
        dangling, self.dangling = self.dangling, None
        if dangling is not None and first and rows[0][0] and not any(rows[0][1:]):
            label, cells, page, columns = dangling
            if _row_name(_norm(label + rows[0][0])) is not None:  # the label's end, the first row of the page
                label += rows[0][0]
                self._take(_norm(label), cells, label, page, quote=pipe_row([label, *cells]), firm=True,
                           grid=columns)
                i = 1
        while i < len(rows):
            row = rows[i]
            i += 1
            head, rest = row[0], [_one_cell(c) for c in row[1:]]
            figures = any(_number(c) is not None for c in rest)
            if not figures and any(rest):
                header.append(rest)
                continue
            if header:
                grid, header = _grid(header), []
            if not figures:
                if head:
                    before.append(head)
                continue
            label = "".join([*before, head])
            before = []
            after = rows[i][0] if i < len(rows) and rows[i][0] and not any(rows[i][1:]) else None
            if after is not None and _row_name(_norm(label + after)) is not None:
                label += after  # the label's last line under the figures (利润（元）, （元）)
                i += 1
            if grid is None or len(rest) != len(grid):
                continue
            if i == len(rows) and _row_name(_norm(label)) is None:
                self.dangling = (label, rest, page_no, grid)
            else:
                self._take(_norm(label), rest, label, page_no, quote=pipe_row([label, *rest]), firm=True, grid=grid)
        return _grid(header) if header else grid  # a header at a page's foot: its rows are on the next page

    def _one_column(self) -> bool:
        """Whether the table is one of this year's figures alone: titled so (本年度主要利润指标), headed 项目 金额,
        or headed by one year and no restated columns."""
        return self.single or (self.years == 1 and not self.restated and self.annex is None)

    def _title(self, norm: str) -> bool:
        """Whether a line titles a table: numbered (二、…, （1）…) or naming its years (截至报告期末公司前三年的主要
        会计数据和财务指标), no figure, no key figure's label."""
        return bool(_NUMBERED.match(norm) or _YEARS_TITLE.search(norm)) and not _TAIL.search(norm) and _row_name(
            _NUMBERED.sub("", norm)) is None

    def _new_table(self, single: bool = False) -> None:
        """A table's title: nothing of the table before it (unit, columns, a label) carries into it."""
        self.unit, self.label, self.years, self.restated, self.change_col = None, [], 0, None, False
        self.header, self.single, self.annex_groups, self.annex = False, single, None, None
        self.order, self.change_apart, self.change_last = [], False, False

    def _annex_head(self, norm: str, tokens: list[str]) -> bool:
        """The 利润表附表's header lines: its groups (净资产收益率, 每股收益) in their order, then their columns
        (全面摊薄, 加权平均 under each); True for a line of it."""
        roe, eps = norm.find("净资产收益率"), norm.find("每股收益")
        if roe >= 0 and eps >= 0 and not _YEAR_IN.search(norm) and len(norm) <= 40 and not _SENTENCE.search(norm):
            self._settle()
            self._new_table()
            self.annex_groups = ["roe", "eps"] if roe < eps else ["eps", "roe"]
            self.annex = []  # its rows are read only under its columns
            return True
        kinds = ("全面摊薄", "加权平均")
        if len(tokens) >= 2 and all(t in kinds for t in tokens):
            self._settle()
            groups, self.annex = self.annex_groups, []
            if groups is not None and len(tokens) == 4 and set(tokens[:2]) == set(kinds) == set(tokens[2:]):
                self.annex = [(groups[k // 2], t) for k, t in enumerate(tokens)]
            return True
        return False

    def _annex_row(self, norm: str, cells: list[str], printed: str, page_no: int | None) -> None:
        """A row of the 利润表附表: only 净利润's, its 加权平均 净资产收益率 and 全面摊薄 每股收益 (this year's)."""
        label = _UNIT_SUFFIX.sub("", _norm("".join([*self.label, printed[: printed.find(cells[0])]])))
        self.label = []
        if _named(label) != "net_profit" or not self.annex or len(cells) != len(self.annex):
            return
        for name, kind in (("roe", "加权平均"), ("eps", "全面摊薄")):
            i = self.annex.index((name, kind))
            what = "净资产收益率" if name == "roe" else "每股收益"
            self._take(f"{what}({kind})" if name == "roe" else "每股收益", [cells[i]],
                       f"利润表附表 净利润 {what}({kind})", page_no, quote=f"利润表附表 {printed.strip()}",
                       one_year=True)

    def _label_line(self, line: str, norm: str, tokens: list[str], page_no: int | None) -> None:
        if norm in ("百分点", "个百分点"):  # the end of a change wrapped to the next line
            return
        if _PAGE_HEAD.search(norm):  # a running header (2019 年年度报告) or a folio (7 / 210): not the table's
            return
        if "附表" in norm or self._annex_head(norm, tokens):  # the 利润表附表: a table of another shape
            if "附表" in norm:
                self._settle()
                self._new_table()
            return
        head = _ONE_YEAR_HEAD.match(norm) if self.years < 2 else None  # (not a word of a years header)
        if head is not None or _ONE_YEAR_TITLE.search(norm):  # 项 目 金 额, 本年度主要财务数据
            self._settle()
            unit = (head.group(1) or self.unit) if head is not None else None  # the unit line above the header
            self._new_table(single=True)  # stays; a title is a table of its own
            self.unit = unit
            return
        changes = bool(_CHANGE_WORDS.search(norm))
        restated = [t for t in tokens if t in _RESTATED]
        if restated and (len(restated) == len(tokens) or (
                len(restated) >= 2 and len(restated) == len(tokens) - 1 and changes)):
            # 调整后 调整前 under the years, or with the change column named among them (调整后 调整前
            # 本期比上期增减(%) 调整后 调整前): the columns after this year's, in order
            self._settle()
            self.restated = [t if t in _RESTATED else "增减" for t in tokens]
            self.label, self.single = [], False
            self.change_col |= changes
            return
        if _YEAR_IN.search(norm):  # a header row (2019年 2018年 …): the columns start again
            if not self.header:
                self.years, self.restated, self.change_col, self.single = 0, None, False, False
                self.order, self.change_last = [], False
            self.change_col |= changes
            self._order(norm)
            self.header = True
            self.years += len(_YEAR_IN.findall(norm))
            self._settle()
            self.label = []
            return
        self.change_col |= changes
        if None not in self.order and (changes or _CHANGE_START.search(norm)):  # (本报告期比 / 上年同期 2021年)
            self.change_apart = True
        group = _GROUP_UNIT.search(norm)
        if group is not None and (group.group(1) or norm[group.end() :] or _group_title(norm[: group.start()])):
            # 经营业绩（人民币百万元） 增减(%), 主要会计数据（千元）, 经营业绩（万元）; not a row's (营业收入（万元）)
            self._settle()
            self.unit, self.label = group.group(2), []
            return
        if _FOREIGN_GROUP.search(norm):  # 经营业绩（港币百万元）
            self._settle()
            self.unit, self.label = currency_of(norm), []
            return
        if self.pending is not None:  # the label's last line, after the numbers
            label, cells, page, unit = self.pending
            if self._row(label + line, cells, page, retry=False, unit=unit):
                self.pending = None
                return
            self._settle()
        self.label.append(line)
        self._unsplit(self.label[:-1], line, line, page_no, 2)

    def _unsplit(self, before: list[str], text: str, printed: str, page_no: int | None, least: int) -> None:
        """``text`` (a label's last line, after the lines ``before``) holding ``least`` figures or more that
        no cell could be split from: the key figure its label names is missing with that reason, unless
        read elsewhere in the table."""
        figures = list(_TAIL.finditer(text))
        if len(figures) < least:
            return
        name = _row_name(_norm("".join([*before, text[: figures[0].start()]])).rstrip("-+\u2212"))
        if name is not None and name not in self.unread:
            where = f"(第{page_no}页)" if page_no else ""
            self.unread[name] = f"本行的数无法分开, 未读「{printed[:40]}」{where}"

    def _settle(self) -> None:
        """A row left waiting for its label's last line, which did not come: read as it stands (a row whose
        unit is nowhere is withheld with the reason)."""
        if self.pending is not None:
            label, cells, page, unit = self.pending
            self.pending = None
            self._take(_norm(label), cells, label, page, unit=unit)

    def _row(self, name_text: str, cells: list[str], page_no: int | None, *, retry: bool = True,
             unit: str | None = None) -> bool:
        taken = self._take(_norm(name_text), cells, name_text, page_no, unit=unit, defer=retry)
        if not taken and retry:
            self.pending = (name_text, cells, page_no, self.unit)
        return taken

    def _columns(self, cells: list[str], grid: list[_Column] | None = None,
                 one_year: bool = False) -> tuple[int, int | None, int | None] | str:
        """Where this year, last year and the change stand among ``cells``, or why they cannot be placed."""
        if grid is not None:
            return _placed(grid)
        if one_year:  # a one-year table: this year's figure alone
            return (0, None, None) if len(cells) == 1 else f"本行{len(cells)}个数, 表头只有本年一列"
        if self.restated and "增减" in self.restated:  # every column after this year's named, the change too
            w = self.restated
            if len(cells) != len(w) + 1 or w.index("调整后") > w.index("调整前"):
                return f"上年有调整前/调整后两列, 但本行{len(cells)}个数与表头{len(w) + 1}列对不上"
            return 0, w.index("调整后") + 1, w.index("增减") + 1
        if self.restated:
            # last year's 调整前 / 调整后 right after this year's figure, the change after them: the change column
            # named among the words (调整前 调整后 调整后 调整前 调整后: SZSE), or not, the words a pair a year
            # restated and a year not restated one figure (2023 | 2022 调整后 调整前 | 增减 | 2021: SSE); a header
            # that names no change (the pre-2007 template: 2003 | 2002 调整后 调整前 | 2001 调整后 调整前) has none
            w = self.restated
            named = len(w) + 1 if len(w) >= 3 and len(w) % 2 else None
            paired = 2 + len(w) + max(0, self.years - 1 - len(w) // 2) if len(w) % 2 == 0 else None
            bare = paired - 1 if paired is not None and not self.change_col else None
            if len(w) < 2 or {w[0], w[1]} != set(_RESTATED) or len(cells) not in (named, paired, bare):
                return f"上年有调整前/调整后两列, 但本行{len(cells)}个数与表头{named or paired}列对不上"
            prior = 1 if w[0] == "调整后" else 2
            return 0, prior, None if len(cells) == bare else 3
        if self.years >= 2 and not self.change_col and len(cells) == self.years:  # no change column
            return 0, 1, None
        expected = self.years + 1 if self.years >= 2 else None  # the years and a change column
        if expected is not None and len(cells) != expected:
            return f"本行{len(cells)}个数, 表头为{expected}列, 无法确定各数所在年份"
        if (placed := self._ordered(len(cells))) is not None:
            return placed
        self.guessed = len(cells) > 2 and self.years >= 2 and not self.restated
        if self.guessed and self.years >= 3 and (self.change_last or (
                _GROUPED.match(_fold(cells[2])) and not _GROUPED.match(_fold(cells[-1])) and _change_like(cells[-1]))):
            # the header's order unknown, a money row shows it: the third column a figure in thousands
            # (153,542), the last a change (6.2%, (4.2%), 不适用): the change stands last, in the table's each row
            self.change_last = True
            return 0, 1, len(cells) - 1
        return 0, 1, 2 if len(cells) > 2 else None

    def _regrid(self, read: TableRow, cells: list[str], placed: tuple[int, int | None, int | None],
                unit: str | None, name: str) -> bool:
        """Whether the text's row, its columns guessed, is the same row the cells' header places otherwise
        (this year's the same, last year's or the change another column): then the cells' reading stands."""
        if not read.guessed or not _agree(read, cells[placed[0]], unit, name):
            return False
        then = self._figures(name, cells, placed, unit, "", None, read.fallback, False)
        return (then.prior, then.change) != (read.prior, read.change)

    def _order(self, norm: str) -> None:
        """A header line's columns (its years, the change's words) appended to ``order`` as printed."""
        marks = sorted([(m.start(), int(m.group(0)[:4])) for m in _YEAR_IN.finditer(norm)]
                       + [(m.start(), None) for m in _CHANGE_START.finditer(norm)], key=lambda p: p[0])
        for _, year in marks:
            if year is not None:
                self.order.append(year)
            elif None not in self.order:  # one change column; its words (本年比 / 上年增减) one mark
                self.order.append(None)

    def _ordered(self, n: int) -> tuple[int, int, int] | None:
        """This year's, last year's and the change's columns as the header's order places them, for a row of
        ``n`` cells (the years and the change); ``None`` where the order is not known (the change's words on a
        line of their own, a year twice, no last year)."""
        order = self.order
        if self.change_apart or None not in order or len(order) != n or len(order) != self.years + 1:
            return None
        years = [y for y in order if y is not None]
        this = max(years)
        if years.count(this) != 1 or years.count(this - 1) != 1:
            return None
        return order.index(this), order.index(this - 1), order.index(None)

    def _take(self, label: str, cells: list[str], printed: str, page_no: int | None, quote: str | None = None,
              unit: str | None = None, firm: bool = False, defer: bool = False,
              grid: list[_Column] | None = None, one_year: bool = False) -> bool:
        """Read a row if its label is a key figure's (True; or withheld, with the reason); ``defer``: a money
        row without a unit waits for its label's last line (``（元）`` after the numbers) instead."""
        out = self.out
        firm = firm or self.change_col
        one_year = one_year or (grid is None and (self.single or (self._one_column() and len(cells) == 1)))
        own = _UNIT_SUFFIX.search(label)
        unit = unit or self.unit
        if own is not None and own.group(1) in MONEY_UNITS:  # 营业收入（元）: the row's own unit
            unit = own.group(1)
        if (foreign := _FOREIGN_SUFFIX.search(label)) is not None:  # 营业收入（港元）
            unit = currency_of(foreign.group(0))
            label = label[: foreign.start()]
        label = _UNIT_SUFFIX.sub("", label)
        ranked = _ranked(label)
        if _OWNERS_PROFIT.search(label) and "扣除" not in label:  # 归属于本银行股东的净利润: no bare 净利润 stands in
            out.named.add("net_profit")
            if (read := out.rows.get("net_profit")) is not None and read.fallback:
                out.rows.pop("net_profit")
        if ranked is None:
            return False
        name, fallback = ranked
        if fallback and name in out.named:  # the table's own row names it (归属于…的净利润, 基本每股收益)
            return True
        if not fallback:
            out.named.add(name)
            if (read := out.rows.get(name)) is not None and read.fallback:  # a pre-2007 label's row gives way
                out.rows.pop(name)
                self.loose.discard(name)
        self.guessed = False
        placed = self._columns(cells, grid, one_year)
        existing = out.rows.get(name)
        if grid is None and existing is not None and (existing.one_year or one_year):
            # the pre-2007 template's figure in its one-year table and its three-year table (or its 利润表附表):
            # one figure, in each table's own unit, this year's the same in both
            if not isinstance(placed, str) and (unit is not None or name in PERCENT_ROWS + PER_SHARE_ROWS):
                self._merge(existing, self._figures(name, cells, placed, unit, quote or f"{printed.strip()} "
                                                f"{' '.join(cells)}", page_no, fallback, one_year))
            return True
        if grid is not None:  # read by its cells: a figure the text left out (or withheld), or one
            # it read without the change (elsewhere than the table: a statement's row), when they agree
            if isinstance(placed, str) or not _clean(cells):
                return True
            if (read := out.rows.get(name)) is not None and (read.change is not None or not _agree(
                    read, cells[placed[0]], unit, name)) and not self._regrid(read, cells, placed, unit, name):
                return True
            out.withheld.pop(name, None)
        elif name in out.rows or name in out.withheld:
            if not (firm and name in self.loose):
                return True
            out.rows.pop(name, None), out.withheld.pop(name, None)  # the table's own row replaces it
            self.loose.discard(name)
        row_quote = quote or f"{printed.strip()} {' '.join(cells)}"
        where = f"(第{page_no}页)" if page_no else ""
        money = name not in PERCENT_ROWS and name not in PER_SHARE_ROWS
        if unit in ("HKD", "USD") and name not in PERCENT_ROWS:  # never converted nor taken as 人民币
            out.foreign.setdefault(name, TableRow(name, None, None, None, row_quote, page_no, unit, unit))
            return True
        if money and unit is None and defer:
            return False
        if not firm:
            self.loose.add(name)
        if money and unit is None:
            out.withheld[name] = f"表格未写单位, 未读「{row_quote[:40]}」{where}"
            return True
        if isinstance(placed, str):
            out.withheld[name] = f"{placed}, 未读「{row_quote[:40]}」{where}"
            return True
        out.rows[name] = self._figures(name, cells, placed, unit, row_quote, page_no, fallback, one_year)
        if self.guessed and grid is None:
            out.rows[name] = replace(out.rows[name], guessed=True)
        restated = self.restated if grid is None else any(c.restated for c in grid)
        if restated and "上年取调整后" not in "".join(out.notes):
            out.notes.append(f"上年数有调整前/调整后两列, 上年取调整后(重述)数{where}")
        return True

    @staticmethod
    def _figures(name: str, cells: list[str], placed: tuple[int, int | None, int | None], unit: str | None,
             quote: str, page_no: int | None, fallback: bool, one_year: bool) -> TableRow:
        """A row's figures in their columns, in 亿元 for money (its table's own ``unit``)."""
        i_cur, i_prior, i_change = placed
        money = name not in PERCENT_ROWS and name not in PER_SHARE_ROWS
        scale = MONEY_UNITS[unit] if money and unit is not None else 1.0
        shown_unit = "%" if name in PERCENT_ROWS else "元/股" if name in PER_SHARE_ROWS else "亿元"

        def scaled(i: int | None) -> float | None:
            value = _number(cells[i]) if i is not None and i < len(cells) else None
            return None if value is None else round(value * scale, 10)

        change = _number(cells[i_change]) if i_change is not None and i_change < len(cells) else None
        rounding = 0.5 * 10 ** -_decimals(_fold(cells[i_cur])) * scale
        return TableRow(name, scaled(i_cur), scaled(i_prior), change, quote, page_no, shown_unit,
                        rounding=round(rounding, 12), fallback=fallback, one_year=one_year)

    def _merge(self, first: TableRow, then: TableRow) -> None:
        """One figure read from two tables of the pre-2007 template (its one-year table and its three-year
        table, each in its own unit; or the 利润表附表): this year's as the first gives it, last year's and the
        change from the one that has them; withheld when their this year's figures differ (a unit or a row
        misplaced: two tables cannot both be right)."""
        out = self.out
        if first.current is None or then.current is None:
            return
        if abs(first.current - then.current) > first.rounding + then.rounding + 1e-9 * abs(first.current):
            where = [f"(第{r.page}页)" if r.page else "" for r in (first, then)]
            out.rows.pop(first.name, None)
            out.withheld[first.name] = (f"两表本年数不符: 「{first.quote[:30]}」{where[0]} vs "
                                        f"「{then.quote[:30]}」{where[1]}, 未读")
            return
        if not first.one_year or then.one_year:  # last year's already read, or neither gives it
            return
        this = then if then.rounding < first.rounding else first  # this year's as printed to the most digits
        out.rows[first.name] = replace(this, prior=then.prior, change=then.change, one_year=False,
                                       prior_quote=then.quote if this is not then else None,
                                       prior_page=then.page if this is not then else None)


@dataclass(frozen=True)
class _Column:
    """A column of a table read by its cells: the year its header names, 调整后/调整前 under it, or the change."""

    year: int | None
    restated: str | None = None
    change: bool = False




def _own_header(rows: list[list[str]]) -> bool:
    """Whether a table read by its cells opens with a header row of its own naming a year (a new table, not
    one going on from the page before)."""
    for row in rows:
        if any(_number(c) is not None for c in row[1:]):
            return False
        if any(_YEAR_IN.search(_norm(c)) for c in row[1:]):
            return True
    return False


_GROUPED = re.compile(r"^[(（]?-?\d{1,3}(?:,\d{3})+(?:\.\d+)?[)）]?$")  # a figure in thousands: 153,542


def _change_like(cell: str) -> bool:
    """Whether a cell reads as a change: a percent (6.2%, (4.2%)), percent points, or a word (不适用, -)."""
    t = _fold(cell)
    return bool(re.search(r"%[)）]?$|百分点$", t)) or t in _WORDS


def _one_cell(cell: str) -> str:
    """A cell whose change is spaced words (``+1.51 个百分点``, ``减少 0.57 个百分点``) as one token; any other as
    it stands (two figures in a cell stay two)."""
    tokens = _tokens(cell)
    return tokens[0] if len(tokens) == 1 and _is_cell(tokens[0]) else cell


def _is_pipe(line: str) -> bool:
    return len(line) > 2 and line[0] == PIPE and line[-1] == PIPE


def pipe_row(cells: list[str]) -> str:
    """A table row read by its cells, as a line of a document's text."""
    return "| " + " | ".join(cells) + " |"


def _row_name(label: str) -> str | None:
    """The key figure a row's label (normalised, its unit in brackets still on) names, if any."""
    return _named(_UNIT_SUFFIX.sub("", _FOREIGN_SUFFIX.sub("", label)))


def _named(label: str) -> str | None:
    """The key figure a row's label (normalised, without its unit) names, if any."""
    ranked = _ranked(label)
    return ranked[0] if ranked is not None else None


_INNER_UNIT = re.compile(r"[(（](?:人民币)?(?:元/股|元|%)[)）]")  # 每股收益(元/股)(全面摊薄): its unit inside
_OWNERS_PROFIT = re.compile(r"归属于(?!少数).*净利润$")  # an owner's profit, however the owner is named


def _ranked(label: str) -> tuple[str, bool] | None:
    """The key figure a row's label (normalised, without its unit) names (``ROWS``: its pattern at the end,
    none of the other row's words before it; else ``FALLBACK_ROWS``), and whether by a fallback's label."""
    label = _INNER_UNIT.sub("", label)
    for rows, fallback in ((ROWS, False), (FALLBACK_ROWS, True)):
        for name, (pattern, other) in rows.items():
            m = re.search(f"(?:{pattern})$", label)
            if m is not None and not (other and re.search(other, label[: m.start()])):
                return name, fallback
    return None


def _grid(rows: list[list[str]]) -> list[_Column] | None:
    """The columns of a table's header rows (``2019年 | 2018年 | 本年比上年增减(%) | 2017年``, over one row or
    several, with 调整后/调整前 under a year that spans both): each column's year, or the change; ``None``
    when the header names fewer than two years or a column is neither."""
    if len({len(r) for r in rows}) != 1:
        return None
    columns: list[_Column] = []
    for cell in zip(*rows, strict=True):
        norm = _norm("".join(cell))
        years = {int(y[:4]) for y in _YEAR_IN.findall(norm)}
        sub = next((w for w in _RESTATED if w in norm), None)
        if _CHANGE_WORDS.search(norm) and not years:
            columns.append(_Column(None, sub, change=True))
        elif len(years) == 1:
            columns.append(_Column(years.pop(), sub))
        elif not years and sub is not None and columns and columns[-1].year is not None:
            columns.append(_Column(columns[-1].year, sub))  # under a year that spans two columns
        else:
            return None
    if len({c.year for c in columns if c.year is not None}) < 2:
        return None
    return columns


def _agree(read: TableRow, cell: str, unit: str | None, name: str) -> bool:
    """Whether a row read from the text states this year's figure of ``cell`` (in the table's unit)."""
    value = _number(cell)
    if value is None or read.current is None:
        return False
    if name not in PERCENT_ROWS and name not in PER_SHARE_ROWS:
        if unit not in MONEY_UNITS:
            return False
        value *= MONEY_UNITS[unit]
    return abs(value - read.current) <= 1e-6 * max(1.0, abs(value))


def _clean(cells: list[str]) -> bool:
    """Whether each cell is one figure, a word or empty, and the money figures agree in their decimals (a
    cell whose figure ran into the next one's is neither: ``8,842,476,363.1`` | ``6 9,974,993,281.20``)."""
    if not all(not c or _is_cell(c) for c in cells):
        return False
    decimals = {len(c.rsplit(".", 1)[1]) if "." in c else 0 for c in cells if "," in c}
    return len(decimals) <= 1


def _placed(grid: list[_Column]) -> tuple[int, int, int | None] | str:
    """This year's, last year's (调整后 where restated) and the change's columns of a grid, or why not."""
    years = [c.year for c in grid if c.year is not None]
    this_year = max(years)

    def column(year: int) -> int | None:
        found = [i for i, c in enumerate(grid) if c.year == year]
        if len(found) > 1:  # 调整后 and 调整前: the restated figure
            found = [i for i in found if grid[i].restated == "调整后"] or [
                i for i in found if grid[i].restated is None]
            if len(found) != 1:
                return None
        return found[0] if found else None

    i_cur, i_prior = column(this_year), column(this_year - 1)
    if i_cur is None or i_prior is None:
        return f"表头有{len(grid)}列, 未能确定本年与上年列"
    changes = [i for i, c in enumerate(grid) if c.change]
    return i_cur, i_prior, changes[0] if changes else None


_GROUP_TITLE = re.compile(r"(?:经营业绩|会计数据|财务指标|财务数据|规模指标|主要数据|每股计)$")


def _group_title(before: str) -> bool:
    """Whether the words before a unit in brackets title a group of rows (经营业绩, 主要会计数据), not a row."""
    return bool(_GROUP_TITLE.search(before))


def _listed(line: str) -> list[str] | None:
    try:
        value = ast.literal_eval(line)
    except (ValueError, SyntaxError):
        return None
    return [str(v).strip() for v in value] if isinstance(value, list) and value else None


# ------------------------------------------------------------------ the statements
_SECTION = r"^(?:[一二三四五六七八九十\d]+[、.．]|[(（][一二三四五六七八九十\d]+[)）])?\s*"
# 合并及公司利润表: the group's and the parent's in one statement
# 合并利润及利润分配表: the pre-2007 name
_STATEMENT = re.compile(_SECTION + r"合并(?:及(?:母)?公司)?利润(?:及利润分配)?表\s*$")


def _line_of(pattern: str) -> re.Pattern[str]:
    """``pattern`` (a title line's: ``^…\\s*$``) as a search for such a line in a whole text, whose lines end at
    a line break or a page break, spaces around them."""
    body = pattern.removeprefix("^").removesuffix(r"\s*$")
    return re.compile(r"(?:^|(?<=\f))[^\S\n\f]*(?:" + body + r")[^\S\n\f]*(?=[\n\f]|\Z)", re.MULTILINE)


_STATEMENT_IN = _line_of(_STATEMENT.pattern)  # a line of a text that is the title
_STATEMENT_END = re.compile(r"母公司利润(?:及利润分配)?表|合并现金流量表|利润表\s*$|利润分配表\s*$"
                            r"|^\S{0,6}现金流量表\s*(?:[(（]续[)）])?\s*$")
_CASH_STATEMENT = re.compile(_SECTION + r"合并(?:及(?:母)?公司)?现金流量表\s*$")
_CASH_STATEMENT_IN = _line_of(_CASH_STATEMENT.pattern)
# a company's own statements where it prints no consolidated ones (a company without subsidiaries, or
# one not consolidating them: 利润及利润分配表 before 2007), taken only where the report titles neither a
# 合并 nor a 母公司 statement (a 合并 title the text layer lost must not make the parent's the group's)
_SOLE_STATEMENT = re.compile(_SECTION + r"利润(?:及利润分配)?表\s*$")
_SOLE_CASH_STATEMENT = re.compile(_SECTION + r"现金流量表\s*$")
_PARENT_IN = _line_of(_SECTION + r"母公司(?:利润(?:及利润分配)?表|现金流量表)\s*$")
_GROUP_FIRST = re.compile(r"(?:本集团|合并)\S*\s.*(?:本公司|母公司|公司)")  # 本集团 … 本公司: the group's columns first
_GROUP_WORDS = re.compile(r"本集团|合并|本公司|母公司|公司")
_CASH_STATEMENT_END = re.compile(r"母公司现金流量表|所有者权益变动表|股东权益变动表|现金流量表\s*$")
_ITEM = (r"^(?:(?:[一二三四五六七八九十]+、|[(（][一二三四五六七八九十\d]+[)）]|\d+[.、．]|其中[:：]|减[:：]|加[:：])"
         r"\s*)*")
_LOSS_NOTE = r"(?:[(（][^()（）]*(?:亏损|损失)[^()（）]*[)）])?"  # （净亏损以“－”号填列）
_ST_REVENUE = re.compile(_ITEM + r"(?:主营业务|营业)收入$")  # 主营业务收入: before 2007
_ST_COST = re.compile(_ITEM + r"(?:主营业务|营业)成本$")
# the totals (营业总收入, 营业总成本: this one with taxes and expenses in it, never 营业成本): no gross margin
_ST_TOTALS = {"revenue": re.compile(_ITEM + r"营业总收入$"), "cost": re.compile(_ITEM + r"营业总成本$")}
_ST_MAIN_REVENUE = re.compile(_ITEM + r"主营业务收入$")
_ST_FINANCIAL = re.compile(_ITEM + r"(?:利息净收入|已赚保费)$")  # a bank's or an insurer's 合并利润表
# before 2007 the statement's 净利润 is the company's own (minority interests deducted above it)
_ST_OLD_PROFIT = re.compile(_ITEM + r"净利润" + _LOSS_NOTE + "$")
# the figures each statement gives the key-figure table's rows a second source for
_ST_ROWS: dict[str, re.Pattern[str]] = {
    "revenue_total": re.compile(_ITEM + r"营业总收入$"),
    "net_profit": re.compile(_ITEM + r"归属于(?:母公司|本行|本公司)(?:普通股)?(?:股东|所有者)的净利润" + _LOSS_NOTE
                             + "$"),
    "eps": re.compile(_ITEM + r"基本每股收益(?:[(（]元(?:/股)?[)）])?$"),
}
_ST_CASH = re.compile(_ITEM + r"经营活动产生的现金流量净额$")
# a statement row's note (附注) reference after its label: 30, 五、41, 七.41, 七、(四十一), (七).43, 附注六(2)
_NUMERALS = "一二三四五六七八九十"
_NOTE_REF = re.compile(rf"(?:附注)?(?:[{_NUMERALS}]+[、.．]?|[(（][{_NUMERALS}]+[)）][、.．]?)?"
                       rf"(?:\d+(?:\.\d+)*|[(（][{_NUMERALS}\d]+[)）])(?:[(（][{_NUMERALS}\d]+[)）])?$")
_MONEY_CELL = re.compile(r"^-?\d{1,3}(?:,\d{3})*\.\d{2}$|^-?\d{1,3}(?:,\d{3})+$|^[(（]\d{1,3}(?:,\d{3})*\.\d{2}[)）]$")
_PER_SHARE_CELL = re.compile(r"^-?\d+\.\d{2,4}$")


@dataclass(frozen=True)
class StatementRow:
    """A figure of the 合并利润表 or 合并现金流量表, this year and last (亿元; EPS in 元/股), as printed, with its
    page: the key-figure table's row checked against it, or given by it where the table has none."""

    name: str
    current: float
    prior: float
    quote: str
    page: int | None
    statement: str  # 合并利润表, 合并现金流量表


def _statement_lines(text: str, key: tuple[str, ...], title: re.Pattern[str], end: re.Pattern[str],
                     foreign: list[tuple[str, str, int]]):
    """(page, line, unit, columns) for each line of the statement ``title`` opens (until ``end``), its unit
    as its 单位 line states it, and how a header placed the group's columns among the parent's in a
    statement of both, whose rows have four figures: ``group_first`` (本集团 … 本公司: the group's this year
    and last first), ``interleaved`` (合并 母公司 合并 母公司 under this year and last: the group's first
    and third), ``unknown`` (another order: no row of four figures is read), or ``None``. One in another
    currency than 人民币 is left (``foreign`` gets its currency, line and page) for the next one (a report
    may print both)."""
    inside, unit, columns = False, None, None
    for page_no, page in enumerate(text.split(PAGE_BREAK), start=1):
        if not inside and not any(k in page for k in key):
            continue
        for raw in page.split("\n"):
            line = raw.strip()
            if not inside:
                if title.match(line):
                    inside, unit, columns = True, None, None
                continue
            if end.search(line) and not title.match(line):
                return
            if (stated := unit_line(line, _norm(line))) in MONEY_UNITS:
                unit = stated
                continue
            if stated is not None:  # another currency
                foreign.append((stated, line, page_no))
                inside = False
                break
            columns = columns or _group_columns(line)
            yield page_no, line, unit, columns


def _sole_title(title: re.Pattern[str], text: str) -> str | None:
    """A company's own statement's title as printed (利润及利润分配表), without its number."""
    m = _line_of(title.pattern).search(text)
    return re.sub(_SECTION, "", m.group(0).strip()).strip() if m is not None else None


def _group_columns(line: str) -> str | None:
    """How a statement's header line orders the group's and the parent's columns (``_statement_lines``)."""
    words = ["g" if w in ("本集团", "合并") else "p" for w in _GROUP_WORDS.findall(line)]
    if len(words) >= 3:
        if words == ["g", "p", "g", "p"]:
            return "interleaved"
        return "group_first" if "".join(words) in ("ggpp", "gpp", "ggp") else "unknown"
    return "group_first" if _GROUP_FIRST.search(line) else None


def _cells_of(line: str, per_share: bool) -> tuple[str, list[str]]:
    """A statement line's label (its note reference dropped) and its figures (a minus sign U+2212 read as -)."""
    tokens = [_fold(t) for t in line.split()]
    cell = _PER_SHARE_CELL if per_share else _MONEY_CELL
    label = _NOTE_REF.sub("", _norm(" ".join(t for t in tokens if not cell.match(t))))
    return label, [t for t in tokens if cell.match(t)]


def _joined(lines):
    """Each statement line with figures: (page, unit, candidates, money, per-share figures); ``candidates``
    are (label, as printed): its own, then with the lines without figures just above it joined (a label
    begun on lines of its own: ``1.归属于母公司股东的净利润`` / ``（净亏损以“-”号填列）`` / the figures)."""
    before: list[tuple[str, str]] = []  # (label, line) of the lines without figures just above, two at most
    for page_no, line, unit, columns in lines:
        label, money = _cells_of(line, per_share=False)
        _, shares = _cells_of(line, per_share=True)
        if columns == "group_first":  # the group's this year and last, before the parent's
            money, shares = (c[:2] if len(c) == 4 else c for c in (money, shares))
        elif columns == "interleaved":  # this year's group and parent, then last year's
            money, shares = ([c[0], c[2]] if len(c) == 4 else c for c in (money, shares))
        if not money and not shares:
            before = [*before[-1:], (label, line)]
            continue
        candidates = [(label, " ".join(line.split()))]
        for k in range(len(before) - 1, -1, -1):
            head = before[k:]
            candidates.append(("".join(b[0] for b in head) + label, " ".join(" ".join(b[1] for b in head).split()
                                                                             + line.split())))
        yield page_no, unit, candidates, money, shares
        before = []


def _matched(pattern: re.Pattern[str], candidates: list[tuple[str, str]]) -> tuple[str, str] | None:
    return next((c for c in candidates if pattern.match(c[0])), None)


def _value(cell: str, scale: float) -> float:
    negative = cell[0] in "(（"
    value = float(cell.strip("()（）").replace(",", ""))
    return round((-value if negative else value) * scale, 10)


def _read_statement(text: str, out: KeyTables) -> None:
    """营业收入 and 营业成本 of the 合并利润表 (never the parent's), this year and last, for the gross margin;
    营业总收入, 归属于母公司股东的净利润 and 基本每股收益 from it, and 经营活动产生的现金流量净额 from the
    合并现金流量表, as the key-figure table's second source (``KeyTables.second``)."""
    paged = PAGE_BREAK in text
    found: dict[str, tuple[float, float, str, int | None]] = {}
    margin_why: str | None = None
    foreign: list[tuple[str, str, int]] = []
    sole = not _PARENT_IN.search(text)  # no 母公司 statement: the company's own may be taken where no 合并 is
    title, named = ((_STATEMENT, "合并利润表") if _STATEMENT_IN.search(text) or not sole else
                    (_SOLE_STATEMENT, _sole_title(_SOLE_STATEMENT, text) or "利润表"))
    lines = _joined(_statement_lines(text, ("利润表", "利润及利润分配表"), title, _STATEMENT_END, foreign))
    old = False  # a pre-2007 statement (主营业务收入): its 净利润 is the company's own
    totals: set[str] = set()  # 营业总收入 / 营业总成本 rows seen ("revenue", "cost")
    financial = False  # a bank's or an insurer's statement: 利息净收入, 已赚保费 among its rows
    for page_no, unit, candidates, money, shares in lines:
        page = page_no if paged else None
        totals |= {name for name, pattern in _ST_TOTALS.items() if _matched(pattern, candidates) is not None}
        financial = financial or any(_ST_FINANCIAL.match(c[0]) for c in candidates)
        old = old or _matched(_ST_MAIN_REVENUE, candidates) is not None
        for name, pattern in (("revenue", _ST_REVENUE), ("cost", _ST_COST)):
            match = _matched(pattern, candidates)
            if name in found or match is None:
                continue
            label, line = match
            if len(money) != 2 or unit is None:
                why = "未写单位" if unit is None else f"{len(money)}个数"
                margin_why = margin_why or (f"{named}的{label}行{why}, 无法确定本年与上年"
                                            f"「{line[:40]}」(第{page_no}页)")
                found[name] = (0.0, 0.0, "", None)  # seen: no later row stands in for it
                continue
            cur, prior = (_value(t, MONEY_UNITS[unit]) for t in money)
            found[name] = (cur, prior, line, page)
            out.second.setdefault(name, StatementRow(name, cur, prior, line, page, named))
        for name, pattern in _ST_ROWS.items():
            if name in out.second:
                continue
            per_share = name == "eps"
            cells = shares if per_share else money
            match = _matched(pattern, candidates)
            if match is None and name == "net_profit" and old:
                match = _matched(_ST_OLD_PROFIT, candidates)
            if match is not None and len(cells) == 2 and (per_share or unit is not None):
                cur, prior = (_value(t, 1.0 if per_share else MONEY_UNITS[unit]) for t in cells)
                out.second[name] = StatementRow(name, cur, prior, match[1], page, named)
    cash_title, cash_named = ((_CASH_STATEMENT, "合并现金流量表") if _CASH_STATEMENT_IN.search(text) or not sole
                              else (_SOLE_CASH_STATEMENT, "现金流量表"))
    cash = _joined(_statement_lines(text, ("现金流量表",), cash_title, _CASH_STATEMENT_END, []))
    for page_no, unit, candidates, money, _ in cash:
        match = _matched(_ST_CASH, candidates)
        if match is not None and len(money) == 2 and unit is not None:
            cur, prior = (_value(t, MONEY_UNITS[unit]) for t in money)
            out.second["operating_cash_flow"] = StatementRow("operating_cash_flow", cur, prior, match[1],
                                                             page_no if paged else None, cash_named)
            break
    out.bank = out.bank or (financial and "cost" not in found)  # its key table named neither
    if out.bank:
        out.withheld["gross_margin"] = "银行/保险的利润表无营业成本, 不计毛利率"
        return
    if margin_why is None and {"revenue", "cost"} <= found.keys():
        rev, cost = found["revenue"], found["cost"]
        out.statement = Statement((rev[0], rev[1]), (cost[0], cost[1]), rev[2], cost[2], rev[3], cost[3], named)
        return
    if margin_why is None and foreign:
        currency, printed, where = foreign[0]
        margin_why = f"{named}以{currency}计, 未换算为人民币, 不计毛利率「{printed[:40]}」(第{where}页)"
    if margin_why is None and (totals - found.keys()):  # a total printed where its own row is not
        lacking = [name for name in ("revenue", "cost") if name not in found]
        printed = "与".join({"revenue": "营业总收入", "cost": "营业总成本"}[n] for n in ("revenue", "cost")
                           if n in totals and n in lacking)
        note = "(营业总成本含税金及附加与期间费用, 不是营业成本)" if "cost" in totals & set(lacking) else ""
        margin_why = (f"{named}只印{printed}{note}, 未印" + "与".join(
            {"revenue": "营业收入", "cost": "营业成本"}[n] for n in lacking) + ", 不计毛利率")
    out.withheld.setdefault("gross_margin", margin_why or "未找到合并利润表的营业收入与营业成本, 不计毛利率")


# ------------------------------------------------------------------ the 主营业务分行业 / 分产品 table
# Each segment's 营业收入, 营业成本, 毛利率 and the margin's change, read from the table of the management
# discussion (SSE: 主营业务分行业情况 / 主营业务分产品情况; SZSE: 占公司营业收入或营业利润10%以上的行业、产品或地区
# 情况): a segment's margin, never the company's (the company's is the 合并利润表's). A row is taken only when
# its printed 毛利率 is the one its 营业收入 and 营业成本 give (the columns placed right); the change is in
# percent points when the row says so (增加 0.11 个百分点) or when the printed revenue and cost changes give
# it, a relative change when they give that (华锦股份 2019: -17.44% for -3.05 points), else as printed. The
# older template names the margin 营业利润率 (国投电力 2011): taken as 毛利率 only where, as for any row, it is
# the one its 营业收入 and 营业成本 give.
_SEG_HEAD = ("营业收入", "营业成本")
_SEG_MARGIN = ("毛利率", "营业利润率")
_SEG_MARGIN_IN = re.compile(r"毛利率|营业利润\s*率")  # in a page's text, the header's words wrapped
_SEG_KINDS = {"分行业": "分行业", "分产品": "分产品", "主营业务分行业情况": "分行业", "主营业务分产品情况": "分产品"}
_SEG_OTHER = re.compile(r"^(?:主营业务)?分(?:地区|销售模式|渠道|季度|业务)")
_SEG_END = re.compile(r"说明|统计口径|产销量|成本分析|实物销售收入|^[(（]?\d+[)）]?[.．、]?[(（]?\d*[)）]?$"
                      r"|^[(（]\d+[)）]|^\(\d+\)\.|^\d+[.．、]")
_SEG_HEADER_WORDS = re.compile(r"营业收入|营业成本|毛利率|比上年|增减|[(（]%[)）]|同期|^项目$|^[(（]?%[)）]?$")
_SEG_TOTAL = re.compile(r"^(?:合计|小计|总计|主营业务合计|其中[:：]?)$")
_PAGE_HEAD = re.compile(r"年度报告(?:全文|正文|摘要)?$|^\d+(?:/\d+)?$|^第\d+页(?:/共\d+页)?$")
SEG_PP_TOLERANCE = 0.15  # percent points between a printed change and the one the printed revenue and cost changes give


@dataclass(frozen=True)
class Segment:
    """One row of the 主营业务分行业 / 分产品 table: 营业收入 and 营业成本 (亿元), 毛利率 (%) and its change as
    printed, with what the change is (``pp`` percent points, ``relative`` a relative change of the margin,
    ``None`` not known), the row as printed and its page."""

    kind: str  # 分行业 / 分产品
    name: str
    revenue: float
    cost: float
    margin: float
    margin_printed: str
    change: float | None
    change_printed: str
    change_kind: str | None
    quote: str
    page: int | None

    def shown(self) -> str:
        """``酒类 91.48% (+0.11pct, 第8页)``: the margin and its change, compact."""
        where = f"第{self.page}页" if self.page else ""
        if self.change is None:
            said = ""
        elif self.change_kind == "pp":
            said = f"{self.change:+.2f}pct"
        elif self.change_kind == "relative":
            said = f"较上年{self.change:+.2f}%, 相对变化非百分点"
        else:
            said = f"比上年增减{self.change_printed}"
        inside = ", ".join(p for p in (said, where) if p)
        return f"{self.name} {self.margin_printed}%" + (f" ({inside})" if inside else "")


@read_once
def read_segments(text: str) -> tuple[tuple[Segment, ...], tuple[str, ...]]:
    """The 分行业 and 分产品 rows of a report's 主营业务 table (the first such table), and the rows left out
    with the reason (columns that do not give the printed margin, a cell count that is not the header's)."""
    if not _SEG_MARGIN_IN.search(text):
        return (), ()
    return _SegmentReader(text).read()


class _SegmentReader:
    def __init__(self, text: str):
        self.text = text
        self.paged = PAGE_BREAK in text
        self.rows: list[Segment] = []
        self.left: list[str] = []
        self.unit: str | None = None
        self.head: list[str] = []  # the lines above the rows (the table's header)
        self.inside = False  # a header naming 营业收入, 营业成本 and 毛利率 seen, with a unit
        self.kind: str | None = None  # the section the rows are in; None: one not read (分地区)
        self.label: list[str] = []  # a label's lines before its numbers
        self.labels_ok = False  # lines before a row are its label (after a section line or a row, not the header)
        self.last: Segment | None = None
        # a row of five numbers whose change cell is printed on the lines after it (减少 / 15.63 / 个百 / 分点),
        # held for them: its name, printed label, cells, quote and page, and the change's word
        self.held: tuple[str, str, list[str], int | None] | None = None
        self.held_word = ""
        self.points = ""  # the start of 个百分点 on a line of its own, wrapped

    def read(self) -> tuple[tuple[Segment, ...], tuple[str, ...]]:
        for page_no, page in enumerate(self.text.split(PAGE_BREAK), start=1):
            if not self.inside and not _SEG_MARGIN_IN.search(page):
                self._page_end(page)
                continue
            for raw in page.split("\n"):
                if self._line(raw.strip(), page_no if self.paged else None):
                    break
            else:
                continue
            break
        self._release()
        return tuple(self.rows), tuple(self.left)

    def _release(self) -> None:
        """A held row whose change never came: left out, with the reason."""
        if self.held is not None:
            name, _, cells, page_no = self.held
            where = f"(第{page_no}页)" if page_no else ""
            self.left.append(f"{self.kind}「{name}」{len(cells)}个数, 表头为6列(营业收入、营业成本、毛利率及三项增减), "
                             f"未读{where}")
            self.held, self.held_word = None, ""

    def _take(self, name: str, printed: str, cells: list[str], page_no: int | None) -> None:
        """A row of six cells taken, or left out with the reason."""
        where = f"(第{page_no}页)" if page_no else ""
        quote = f"{printed} {' '.join(cells)}".strip()
        segment = _segment(self.kind, name, cells, quote, page_no, self.unit or "元",
                           points="百分点" in "".join(self.head))
        if isinstance(segment, str):
            self.left.append(f"{self.kind}「{name}」{segment}, 未读「{quote[:40]}」{where}")
            self.last = None
            return
        self.rows.append(segment)
        self.last = segment

    def _page_end(self, page: str) -> None:
        """A page no table of the kind is on: only its unit lines are looked at, the last as ``_line`` takes
        it, for a table's unit line can end the page before the table (the page broken between them: 华能水电
        2024)."""
        for raw in reversed(page.split("\n")):
            if (stated := unit_line(raw, _norm(raw))) is not None:
                self.unit, self.head, self.kind = (stated if stated in MONEY_UNITS else None), [], None
                return

    def _line(self, line: str, page_no: int | None) -> bool:
        """One line; True at the end of the table."""
        if not line:
            return False
        norm = _norm(line)
        if _PAGE_HEAD.search(norm):  # a page's running head or number, inside a table going over the page
            return False
        if (stated := unit_line(line, norm)) is not None:  # a table in 港元 / 美元 is not read
            if self.rows:
                return True
            self.unit = stated if stated in MONEY_UNITS else None
            self.head, self.inside, self.kind = [], False, None
            return False
        if not self.inside:
            if "。" in line or "，" in line:
                self.head = []
                return False
            tokens = _tokens(line)
            if _cells(tokens) >= 2:  # another table's row
                self.head = []
                return False
            self.head.append(norm)
            joined = "".join(self.head)
            if self.unit is not None and all(w in joined for w in _SEG_HEAD) and any(w in joined for w in _SEG_MARGIN):
                self.inside, self.label, self.labels_ok = True, [], False
                # the section the header names, on its first line or the line that ends it (wrapped)
                self.kind = next((k for head in reversed(self.head) for w, k in _SEG_KINDS.items()
                                  if head.startswith(w)), None)
            return False
        if self.held is not None:  # a row waiting for its change, printed on the lines after it
            if norm in ("增加", "减少", "上升", "下降") and not self.held_word:
                self.held_word = norm
                return False
            if (tokens := _tokens(line)) and len(tokens) == 1 and _cells(tokens) == 1:
                name, printed, cells, held_page = self.held
                self.held, word = None, self.held_word
                self.held_word = ""
                self._take(name, printed, [*cells, f"{word}{tokens[0]}"], held_page)
                return False
            self._release()
        if norm in ("百分点", "个百分点") or (self.points + norm) == "个百分点":  # the last change's end, wrapped
            self.points = ""
            if self.last is not None and self.last.change_kind != "pp" and self.last.change is not None:
                self.rows[-1] = self.last = _with_points(self.last)
            return False
        if norm in ("个", "个百", "个百分", "百", "百分") and self.last is not None:  # 个百分点 begun, wrapped again
            self.points += norm
            return False
        self.points = ""
        if _SEG_OTHER.match(norm):
            self.kind, self.label, self.labels_ok = None, [], False
            return False
        kind = next((k for w, k in _SEG_KINDS.items() if norm == w or norm.startswith(w + "营业收入")
                     or (norm.startswith(w) and _SEG_HEADER_WORDS.search(norm[len(w):]))), None)
        if kind is not None:
            if self.rows and any(r.kind == kind for r in self.rows):
                return True  # the section again: another table
            self.kind, self.label, self.labels_ok = kind, [], norm == next(w for w in _SEG_KINDS if norm.startswith(w))
            return False
        tokens = _tokens(line)
        n = _cells(tokens)
        if n < 2:
            if self.rows and _SEG_END.search(norm):
                return True
            if self.labels_ok and not _SEG_HEADER_WORDS.search(norm):
                self.label.append(" ".join(tokens))
            return False
        own = " ".join(tokens[: len(tokens) - n])
        label = "".join([*self.label, own]) if self.labels_ok else own
        printed = " ".join([*self.label, own]) if self.labels_ok else own
        self.label, self.labels_ok = [], True
        if self.kind is None:
            self.last = None
            return False
        name = _norm(label)
        if not name or _SEG_TOTAL.match(name):
            self.last = None
            return False
        cells = tokens[len(tokens) - n :]
        if n == 5:  # its change may follow on the next lines
            self.held, self.held_word, self.last = (name, printed, cells, page_no), "", None
            return False
        if n != 6:
            where = f"(第{page_no}页)" if page_no else ""
            self.left.append(f"{self.kind}「{name}」{n}个数, 表头为6列(营业收入、营业成本、毛利率及三项增减), "
                             f"未读{where}")
            self.last = None
            return False
        self._take(name, printed, cells, page_no)
        return False


def _decimals(tok: str) -> int:
    m = re.search(r"\.(\d+)", tok)
    return len(m.group(1)) if m else 0


def _segment(kind: str, name: str, cells: list[str], quote: str, page_no: int | None, unit: str, *,
             points: bool) -> Segment | str:
    """A row of six cells (营业收入, 营业成本, 毛利率, and the three changes), or why it is not taken."""
    rev, cost, margin, rev_change, cost_change, change = (_number(c) for c in cells)
    if rev is None or cost is None or margin is None or rev <= 0:
        return "营业收入、营业成本或毛利率不是数"
    exact = (rev - cost) / rev * 100
    if abs(exact - margin) > 0.5 * 10 ** -_decimals(_fold(cells[2])) + 0.001:
        return f"毛利率{cells[2]}与营业收入、营业成本算得的{exact:.2f}%不符, 各列无法确定"
    words = _fold(cells[5])
    kind_of: str | None = None
    if change is not None:
        if "百分点" in words or points:
            kind_of = "pp"
        elif rev_change is not None and cost_change is not None and rev_change > -100 and cost_change > -100:
            prior = 100 - (cost / rev) * (1 + rev_change / 100) / (1 + cost_change / 100) * 100
            pp = exact - prior
            relative = pp / abs(prior) * 100 if abs(prior) > 1e-9 else None
            rel_tol = SEG_PP_TOLERANCE * 100 / abs(prior) if relative is not None else 0.0
            near_pp = abs(change - pp) <= SEG_PP_TOLERANCE
            near_rel = relative is not None and abs(change - relative) <= rel_tol
            if near_pp and not near_rel:
                kind_of = "pp"
            elif near_rel and not near_pp:
                kind_of = "relative"
    scale = MONEY_UNITS[unit]
    return Segment(kind, name, round(rev * scale, 10), round(cost * scale, 10), margin, _fold(cells[2]).rstrip("%"),
                   change, cells[5], kind_of, quote, page_no)


def _with_points(s: Segment) -> Segment:
    return replace(s, change_kind="pp", change_printed=s.change_printed + "个百分点",
                   quote=s.quote + " 个百分点")


def shown_segments(segments: tuple[Segment, ...]) -> str | None:
    """The result's column: ``分行业: 酒类 91.48% (+0.11pct, 第8页) | 分产品: 茅台酒 93.99% (…); …``."""
    parts = []
    for kind in ("分行业", "分产品"):
        rows = [s.shown() for s in segments if s.kind == kind]
        if rows:
            parts.append(f"{kind}: " + "; ".join(rows))
    return " | ".join(parts) or None


_SHOWN = re.compile(r"^(?P<name>.+?) (?P<margin>-?\d+(?:\.\d+)?)%(?: \((?P<rest>.*)\))?$")


def printed_number(printed: str) -> float | None:
    """A cell's number as a report prints it (``38.89%``, ``增加 0.11 个百分点``, ``(344,587)``), or ``None``."""
    tokens = _tokens(printed.strip())
    return _number(tokens[0]) if len(tokens) == 1 else None


def parse_shown(column: str | None) -> list[dict[str, object]]:
    """The segments of a result's column as ``shown_segments`` writes it: kind, name, margin, change
    (its number as shown, ``None`` without one) and page."""
    out: list[dict[str, object]] = []
    for part in (column or "").split(" | "):
        kind, _, items = part.partition(": ")
        for item in items.split("; ") if items else ():
            m = _SHOWN.match(item)
            if m is None:
                continue
            rest = m.group("rest") or ""
            page = re.search(r"第(\d+)页", rest)
            said = rest[: page.start()] if page else rest
            number = re.search(r"[-+]?\d+(?:\.\d+)?", said.replace(",", ""))
            out.append({"kind": kind, "name": m.group("name"), "margin": float(m.group("margin")),
                        "change": float(number.group(0)) if number else None,
                        "page": int(page.group(1)) if page else None})
    return out
