"""Figures read from report text: names, units, the ``number+unit`` format the model writes, and
what code reads and checks itself.

Code reads what code can read. Explicit statements — ``归属于上市公司股东的净利润-5,657,115.16元``,
``亏损3152.1万港元``, ``营业收入1505.60亿元，同比增长18.04%``, ``由盈转亏`` — are matched here,
each with the verbatim quote it came from; the model fills in the rest, and every figure the
model reports must come with a quote that code finds in the text and whose number is the figure.
A figure in another currency (港元, 美元) is recognised and never treated as 元.
"""

from __future__ import annotations

import array
import bisect
import functools
import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import StringConstraints

from .. import periods
from .document import Document, read_once
from .sections import section_starts
from .tables import MONEY_UNITS, StatementRow, TableRow, page_of, read_key_tables, read_segments

ALL_UNITS = (*MONEY_UNITS, "%", "元/股")
# name → (label, canonical unit); the order of the result columns
FIGURES: dict[str, tuple[str, str]] = {
    "revenue": ("营收", "亿元"),
    "net_profit": ("净利润", "亿元"),
    "revenue_growth": ("营收增长", "%"),
    "net_profit_growth": ("净利增长", "%"),
    "gross_margin": ("毛利率", "%"),
    "net_margin": ("净利率", "%"),
    "roe": ("ROE", "%"),
    "eps": ("EPS", "元/股"),
}

_NUMBER = r"-?[0-9]{1,12}(\.[0-9]{1,4})?"
_UNITS = "|".join(re.escape(u) for u in sorted(ALL_UNITS, key=len, reverse=True))
FIGURE_PATTERN = f"^{_NUMBER}({_UNITS})$"
_FIGURE = re.compile(f"^(?P<value>{_NUMBER})(?P<unit>{_UNITS})$")
# A figure as written in the text: digits, then the unit next to them ("1505.60亿元", "18.04%").
Figure = Annotated[str, StringConstraints(pattern=FIGURE_PATTERN)]


def split_figure(text: str) -> tuple[float, str]:
    m = _FIGURE.match(text)
    if m is None:  # the schema's pattern already guarantees the shape
        raise ValueError(f"not a figure: {text!r}")
    return float(m.group("value")), m.group("unit")


def convert(value: float, from_unit: str, to_unit: str, digits: int = 10) -> float | None:
    """``value`` in ``to_unit`` (money units scale; 元 and 元/股 are one unit for a per-share
    figure), or ``None`` when the units do not convert."""
    if from_unit == to_unit:
        return value
    if from_unit in MONEY_UNITS and to_unit in MONEY_UNITS:
        return round(value * MONEY_UNITS[from_unit] / MONEY_UNITS[to_unit], digits)
    if {from_unit, to_unit} == {"元", "元/股"}:
        return value
    return None


# ------------------------------------------------------------------ reading text in code
@read_once
def normalize(text: str) -> str:
    """Width-folded (NFKC: full-width digits and punctuation), without whitespace, minus sign unified.
    Read once per ``Document``: one row's report text is read by several checks (figures, loss, shares,
    quotes)."""
    return re.sub(r"\s+", "", _folded(text))


@read_once
def _folded(text: str) -> str:
    return unicodedata.normalize("NFKC", text).replace("−", "-")


@dataclass(frozen=True)
class Reading:
    """One figure as read from the text: its value in the canonical unit and the quote it came from."""

    name: str
    value: float | None  # None: stated in another currency, not converted
    quote: str  # verbatim as in the text (whitespace runs as one space)
    currency: str = "CNY"
    page: int | None = None  # the document page it stands on (a text with pages)


_NUM = r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?"
# "1.26亿元", "5,657,115.16元", "3152.1万港元", and in broker notes "0.92亿" (元 left out after a scale)
_MONEY = r"(?:(?P<scale>百万|千|万|亿)(?P<cur>元|港元|港币|美元)?|(?P<cur1>元|港元|港币|美元))"
_GAP = r"(?:为|达|达到|约|了|:|：|人民币|共计|实现|是)*"
_GROWTH = (r"(?:[,，/(（]?(?:同比|较上年同期|比上年同期|较上年)?(?P<dir>增长|上升|增加|下降|减少|下滑|同增|同减|[+-])"
           r"(?P<g>-?\d+(?:\.\d+)?)%)?")  # "同比增长-2.28%": a fall, written as negative growth
_DOWN = ("下降", "减少", "下滑", "同减", "-")
_LABELS = {
    "revenue": r"营业总收入|营业收入|营收",
    "net_profit": r"归属于?(?:上市公司|母公司)(?:股东|所有者)的?净利润|归母净利润?|净利润",
    "gross_margin": r"毛利率",
    "net_margin": r"销售净利率|净利率",
    "roe": r"加权平均净资产收益率|净资产收益率|ROE",
    "eps": r"基本每股收益|每股收益|EPS",
}
# 扣除非经常性损益后的净利润 is another figure: never read it as net profit
_EXCLUDED_BEFORE = re.compile(r"(扣除非经常性损益后的?|扣非后?|少数股东|归属于少数股东的)$")
# a forecast or a commitment is not a reported figure: never read one from its clause
_FORECAST = re.compile(r"预计|预测|预期|有望|承诺|目标|[上下]调|给予|(?:19|20)\d{2}[Ee](?![A-Za-z])")
_CLAUSE_ENDS = "。；;!！?？"  # (the text is read without whitespace: a line break ends nothing)
_RANGE_AFTER = re.compile(r"^(?:至|到|~|～|-)[-+]?\d")
_CURRENCY = {"元": "CNY", "港元": "HKD", "港币": "HKD", "美元": "USD"}
_SCALE = {None: 1e-8, "千": 1e-5, "万": 1e-4, "百万": 1e-2, "亿": 1.0}
_LOSS = re.compile(r"(?P<q>(?:净)?亏损" + _GAP + r"(?P<n>" + _NUM + r")" + _MONEY + r")")
_RESULT_WORDS = re.compile(r"由盈转亏|转为亏损|净利润为负")  # the result's sign stated in words
_OTHERS_CLAUSE = re.compile(r"子公司|分公司|分部|板块|部分|联营|合营|参股|少数股东|业务|项目|产品")
# a clause whose subject is a part of the company ("，医药板块…，实现净利润2.95亿元"): its figures, to the
# sentence's end or until a clause names the company again, are the part's, not the company's
_PART_SUBJECT = re.compile(r"(?:^|[，,：:])(?:其中|而|报告期内)?[\u4e00-\u9fffA-Za-z]{0,8}?"
                           r"(?:板块|分部|子公司|分公司|事业部|事业群)")
_COMPANY_SUBJECT = re.compile(r"[，,：:](?:报告期内)?(?:公司|本公司|集团|本集团)(?:全年|整体|合并)?(?:实现|营业|归属)")
# last year's figure, as prose states it: "上年同期净利润-0.8亿元", "去年同期亏损0.8亿元", and right after this
# year's profit "净利润-1.2亿元，上年同期为-0.8亿元" / "(上年同期：亏损0.8亿元)"
_PRIOR = r"(?:上年同期|去年同期|上一年度|上年度|上年|去年)"
_PRIOR_BEFORE = re.compile(_PRIOR + r"(?:的)?$")  # "上年同期营业收入90亿元" is not this year's revenue
# a clause about last year: one that begins with it ("，去年同期实现归母净利润41.21亿元，折合EPS为1.37元"), not
# a comparison with it ("较上年同期增长10%"); it lasts until a clause names this period again
_PRIOR_SUBJECT = re.compile(r"(?:^|[，,：:])(?:而|公司|其中)?" + _PRIOR + r"(?!比)")
_THIS_SUBJECT = re.compile(r"(?:^|[，,：:])(?:而|公司|其中)?(?:本期|本年|今年|报告期内?|本报告期|(?:19|20)\d{2}年)")
_PRIOR_LOSS_BEFORE = re.compile(_PRIOR + r"(?:的)?(?:" + _LABELS["net_profit"] + r")?" + _GAP + r"$")
_PRIOR_PROFIT = re.compile(_PRIOR + r"(?:的)?(?:实现|录得)?(?:(?:" + _LABELS["net_profit"] + r")" + _GAP
                           + r"(?P<loss>(?:净)?亏损)?|"
                           + _GAP + r"(?P<loss2>(?:净)?亏损))" + _GAP + r"(?P<n>" + _NUM + r")" + _MONEY)
_AFTER_PROFIT = re.compile(r"^[,，;；(（]?(?:而|较|对比|相比)?" + _PRIOR + r"(?:的)?(?:" + _LABELS["net_profit"] + r")?"
                           + _GAP + r"(?P<loss>(?:净)?亏损)?" + _GAP + r"(?P<n>" + _NUM + r")" + _MONEY)


# The words without which a text cannot state a figure (casefolded, whitespace removed): a figure
# whose words are nowhere in the text is not asked of the model. Broad on purpose: a word too many
# costs a few tokens; a word missing would lose a figure.
_NAMED = {
    "revenue": r"收入|营收|销售额|revenue|sales|turnover",
    "net_profit": r"利润|净利|盈利|亏|业绩|profit|income|loss|earnings",
    "gross_margin": r"毛利|grossmargin|grossprofit",
    "net_margin": r"净利率|净利润率|netmargin|profitmargin",
    "roe": r"净资产收益率|roe|returnonequity",
    "eps": r"每股收益|每股盈利|每股净收益|每股利润|eps|pershare",
}
_NAMED["revenue_growth"] = _NAMED["revenue"]
_NAMED["net_profit_growth"] = _NAMED["net_profit"]


@read_once
def named_figures(text: str) -> frozenset[str]:
    """The figures whose words occur in ``text`` (those a reader could find there at all)."""
    t = normalize(text).casefold()
    return frozenset(name for name, words in _NAMED.items() if re.search(words, t))


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("+", ""))


def _money(match: re.Match, sign: float = 1.0, number: str | None = None) -> tuple[float | None, str]:
    currency = _CURRENCY[match.group("cur") or match.group("cur1") or "元"]
    if currency != "CNY":
        return None, currency
    value = _number(number if number is not None else match.group("n"))
    return round(sign * value * _SCALE[match.group("scale")], 10), currency


# Figures only code reads (not asked of the model), from a report's key-figure tables — and last year's
# profit from prose too ("上年同期净利润-0.8亿元"): name → (label, unit)
TABLE_FIGURES: dict[str, tuple[str, str]] = {
    "net_profit_prev": ("上年净利润", "亿元"),
    "revenue_prev": ("上年营收", "亿元"),
    "roe_prev": ("上年ROE", "%"),
    "eps_prev": ("上年EPS", "元/股"),
    "net_profit_deducted": ("扣非净利润", "亿元"),
    "operating_cash_flow": ("经营现金流", "亿元"),
    "gross_margin_prev": ("上年毛利率", "%"),
}
# a key-figure row → the figures read from it (this year's, its change, last year's)
_FROM_ROW = {"revenue": ("revenue", "revenue_growth", "revenue_prev"),
             "net_profit": ("net_profit", "net_profit_growth", "net_profit_prev"),
             "roe": ("roe", "roe_prev"), "eps": ("eps", "eps_prev"),
             "net_profit_deducted": ("net_profit_deducted",), "operating_cash_flow": ("operating_cash_flow",),
             "gross_margin": ("gross_margin", "gross_margin_prev")}


def read_figures(text: str) -> dict[str, Reading]:
    """The figures code can read from ``text``, each with its verbatim quote (and page): a report's
    key-figure tables first (``tables.read_tables``), then statements in its prose (first of each
    wins). Read once per text: a row's schema, the repair of its answer and its audit all ask."""
    return dict(_read_figures(text))


@read_once
def _read_figures(text: str) -> dict[str, Reading]:
    out = dict(_from_tables(text))
    held = _table_held(text)
    for name, r in _read_prose(text).items():
        if name not in held:  # a prose figure never stands in for a figure of the report's own tables
            out.setdefault(name, r)
    return out


@read_once
def _table_held(text: str) -> frozenset[str]:
    """The figures a report's key-figure tables (and its 合并利润表) answer for, read or withheld: prose
    never gives them."""
    kt = read_key_tables(text)
    if not kt.found:
        return frozenset()
    return frozenset(n for row in _FROM_ROW for n in _FROM_ROW[row])


@read_once
def withheld_figures(text: str) -> dict[str, str]:
    """Figures code leaves empty on purpose, each with the reason (a row whose columns or unit cannot be
    placed, a bank's gross margin): never guessed, nor asked of the model."""
    kt = read_key_tables(text)
    read = _from_tables(text)
    return {n: why for row, why in kt.withheld.items() for n in _FROM_ROW.get(row, (row,)) if n not in read}


@read_once
def missing_figures(text: str) -> dict[str, str]:
    """Key figures a report's tables neither give nor withhold, each with the reason: no key-figure table, no
    row naming it, a row without the change column or last year's figure. For the notes of a figure left
    empty (the model's reading, where traced, still stands)."""
    kt = read_key_tables(text)
    read = _from_tables(text)
    out: dict[str, str] = {}
    for row, why in kt.absent.items():
        out.update((n, why) for n in _FROM_ROW[row] if n not in read)
    for row_name, row in kt.rows.items():
        where = f"(第{row.page}页)" if row.page else ""
        quote = f"「{row.quote[:40]}」{where}"
        for n in _FROM_ROW[row_name][1:]:
            if n in read:
                continue
            if n.endswith("_growth"):
                out[n] = f"表中本行未给出本年比上年增减数{quote}"
            elif row.prior is None:
                out[n] = f"表中本行只有本年数{quote}"
    return out


def table_notes(text: str) -> list[str]:
    """How code placed the key figures (上年取调整后)."""
    return list(read_key_tables(text).notes)


@read_once
def _from_tables(text: str) -> dict[str, Reading]:
    """The key figures the report's tables give (read once per ``Document``: never changed by a caller)."""
    out: dict[str, Reading] = {}
    kt = read_key_tables(text)
    for name, row in kt.rows.items():
        if row.current is not None:
            out[name] = Reading(name, row.current, row.quote, page=row.page)
        if name in ("revenue", "net_profit") and row.change is not None:
            growth = "revenue_growth" if name == "revenue" else "net_profit_growth"
            out[growth] = Reading(growth, row.change, row.quote, page=row.page)
        if row.prior is not None and f"{name}_prev" in TABLE_FIGURES:  # last year's column of the same row
            # (or of the same row of another table: the pre-2007 template's three-year table)
            out[f"{name}_prev"] = Reading(f"{name}_prev", row.prior, row.prior_quote or row.quote,
                                          page=row.prior_page if row.prior_quote else row.page)
    for name, row in kt.foreign.items():  # a row in 港元 or 美元 where no 人民币 row is read: flagged, not converted
        if name in kt.rows or name in kt.withheld:
            continue
        for each in (name, f"{name}_prev"):
            if each == name or each in TABLE_FIGURES:
                out[each] = Reading(each, None, row.quote, row.currency, row.page)
    for name, row in kt.second.items():  # a key figure the table does not give: the statement's, with its quote
        if name not in SECOND or name in kt.rows or name in kt.foreign:
            continue
        quote = f"{row.statement} {row.quote}"
        out[name] = Reading(name, row.current, quote, page=row.page)
        if f"{name}_prev" in TABLE_FIGURES:
            out[f"{name}_prev"] = Reading(f"{name}_prev", row.prior, quote, page=row.page)
    s = kt.statement
    if s is not None:
        for name, i in (("gross_margin", 0), ("gross_margin_prev", 1)):
            margin = s.margin(i)
            if margin is not None:
                out[name] = Reading(name, margin, s.quote, page=s.revenue_page)
    return out


# the key figures the statements give a second source for (合并利润表, 合并现金流量表)
SECOND = ("revenue", "net_profit", "eps", "operating_cash_flow")
PER_SHARE_ROUNDING = 0.005  # 元/股: a table's EPS to two decimals against the statement's four


def second_source(text: str) -> list[tuple[str, TableRow, StatementRow, bool]]:
    """Each key figure both the table and a statement state this year: (name, the table's row, the statement's,
    whether they agree within rounding). Like with like: a table's 营业总收入 against the statement's, its
    营业收入 against 营业收入; the company's profit against 归属于母公司股东的净利润."""
    kt = read_key_tables(text)
    out = []
    for name in SECOND:
        row = kt.rows.get(name)
        if row is None or row.current is None:
            continue
        key = "revenue_total" if name == "revenue" and "营业总收入" in normalize(row.quote) else name
        st = kt.second.get(key)
        if st is None:
            continue
        gap = abs(row.current - st.current)
        agree = gap <= PER_SHARE_ROUNDING if name == "eps" else gap <= 5e-4 * max(abs(row.current), abs(st.current))
        out.append((name, row, st, agree))
    return out


def unit_slip(a: float, b: float) -> float | None:
    """How many times (10, 100 … 10⁸) one figure is the other where they are the same digits a power of ten
    apart (a money unit read wrong: 元 for 万元), or ``None``."""
    if a == 0 or b == 0 or (a > 0) != (b > 0):
        return None
    ratio = max(abs(a), abs(b)) / min(abs(a), abs(b))
    times = 10 ** round(math.log10(ratio))
    return float(times) if times >= 10 and abs(ratio / times - 1) <= 0.005 else None


def table_prose_conflicts(text: str, tolerance: float) -> list[tuple[str, Reading, Reading]]:
    """Figures a report's table and its prose both state, with values more than ``tolerance`` apart (not the
    gross margin: the prose's is often a segment's or the main business's, another figure than the
    statement's), each compared only with the same line (``_line``)."""
    tables, prose = _from_tables(text), _read_prose(text)
    out = []
    for name, t in tables.items():
        p = prose.get(name) if name != "gross_margin" else None
        if p is None or p.value is None or t.value is None or _line(name, p.quote) != _line(name, t.quote):
            continue
        if abs(p.value - t.value) > tolerance * max(abs(p.value), abs(t.value), 1e-12):
            out.append((name, t, p))
    return out


def _line(name: str, quote: str) -> str:
    """Which line a figure's quote states: 营业总收入 or 营业收入, the profit attributable to the company's
    shareholders or the consolidated one (a bare 净利润); the same for their changes."""
    q = normalize(quote)
    if name.startswith("revenue"):
        return "营业总收入" if "营业总收入" in q else "营业收入"
    if name.startswith("net_profit"):
        return "归母" if re.search(r"归属于?(?:上市公司|母公司)|归母", q) else "净利润"
    return name


@read_once
def _offsets(text: str) -> array.array | None:
    """For each character of ``normalize(text)``, its index in ``text`` (``None`` when the
    character-wise fold does not give the same string). An array of machine integers, as
    ``_whitespace_runs``: kept with the text's readings, on disk and in memory."""
    offsets = array.array("i")
    fold = unicodedata.normalize
    for i, ch in enumerate(text):
        piece = fold("NFKC", ch)
        if len(piece) == 1:  # most characters: kept unless whitespace
            if not piece.isspace():
                offsets.append(i)
            continue
        piece = re.sub(r"\s+", "", piece).replace("−", "-")
        offsets.extend([i] * len(piece))
    return offsets if len(offsets) == len(normalize(text)) else None


@read_once
def _whitespace_runs(text: str) -> tuple[array.array, array.array] | None:
    """Where ``normalize`` removed whitespace: (normalized position of each run, characters removed up to
    and including it), when the fold keeps every other character one for one (the common case: CJK,
    full-width forms); ``None`` otherwise. Arrays of machine integers: a report has thousands of runs,
    and its readings stay in memory while its row is asked."""
    folded = _folded(text)
    if len(folded) != len(text):
        return None
    at, removed, total = array.array("i"), array.array("i"), 0
    for m in re.finditer(r"\s+", folded):
        at.append(m.start() - total)
        total += m.end() - m.start()
        removed.append(total)
    return at, removed


def _original(text: str, p: int) -> int | None:
    """The index in ``text`` of ``normalize(text)[p]``."""
    runs = _whitespace_runs(text)
    if runs is None:
        off = _offsets(text)  # the slow, general map
        return None if off is None else off[p]
    k = bisect.bisect_right(runs[0], p)
    return p + (runs[1][k - 1] if k else 0)


def verbatim(text: str, start: int, end: int) -> tuple[str, int]:
    """The words of ``text`` behind ``normalize(text)[start:end]`` as written (whitespace runs as one
    space), and where they start in ``text``."""
    a = _original(text, start) if end > start else None
    b = _original(text, end - 1) if a is not None else None
    if a is None or b is None:
        return normalize(text)[start:end], 0
    return " ".join(text[a : b + 1].split()), a


def _reading(text: str, name: str, value: float | None, start: int, end: int, currency: str = "CNY") -> Reading:
    quote, at = verbatim(text, start, end)
    return Reading(name, value, quote, currency, page_of(text, at))


@read_once
def _read_prose(text: str) -> dict[str, Reading]:
    t = normalize(text)
    out: dict[str, Reading] = {}
    profit_at: tuple[int, int] | None = None  # where this year's profit is stated (a list of figures aside)
    for name in ("revenue", "net_profit"):
        found = _first_money(t, name)
        if found is None:
            continue
        m, value, currency = found
        out[name] = _reading(text, name, value, m.start(), m.end(), currency)
        if name == "net_profit" and "list" not in m.groupdict():
            profit_at = (m.start(), m.end())
        g = m.groupdict().get("g")
        if g and not (g.startswith("-") and m.group("dir") in _DOWN):  # "下降-5%" says neither: not read
            sign = -1 if m.group("dir") in _DOWN else 1
            growth = "revenue_growth" if name == "revenue" else "net_profit_growth"
            out[growth] = _reading(text, growth, sign * float(m.group("g")), m.start(), m.end())
    if "net_profit" not in out:
        loss = _own_loss(t)
        if loss:
            value, currency = _money(loss, sign=-1.0)
            out["net_profit"] = _reading(text, "net_profit", value, loss.start("q"), loss.end("q"), currency)
            profit_at = (loss.start("q"), loss.end("q"))
    prior = _prior_profit(text, t, profit_at)
    if prior is not None:
        out["net_profit_prev"] = prior
    for name, unit in (("gross_margin", "%"), ("net_margin", "%"), ("roe", "%"), ("eps", "元")):
        m = next((m for m in re.finditer(f"(?:{_LABELS[name]}){_GAP}(?P<n>{_NUM}){unit}", t) if _reported(t, m)),
                 None)
        if m:
            out[name] = _reading(text, name, _number(m.group("n")), m.start(), m.end())
    return out


def _clause(t: str, at: int) -> str:
    """The sentence ``at`` stands in, up to it (from the last of ``_CLAUSE_ENDS`` before it)."""
    return t[max(t.rfind(ch, 0, at) for ch in _CLAUSE_ENDS) + 1 : at]


def _reported(t: str, m: re.Match) -> bool:
    """A statement of a reported figure: not 扣非, not last year's, not a forecast's clause, not one end of
    a range, not in a sentence about a part of the company (a segment, a subsidiary)."""
    before = t[: m.start()]
    clause = _clause(t, m.start())
    return not (_EXCLUDED_BEFORE.search(before) or _PRIOR_BEFORE.search(before) or _FORECAST.search(clause)
                or _RANGE_AFTER.match(t[m.end() :]) or _about_last_year(clause) or _about_a_part(clause))


def _about_a_part(clause: str) -> bool:
    """Whether the sentence so far speaks of a part of the company (a segment, a subsidiary): a clause
    began with it and none since has named the company as its subject."""
    part = [p.end() for p in _PART_SUBJECT.finditer(clause)]
    return bool(part) and not _COMPANY_SUBJECT.search(clause, part[-1])


def _about_last_year(clause: str) -> bool:
    """Whether the sentence so far speaks of last year: a clause began with it (去年同期实现…) and none
    since has named this period (本期, 报告期内, 2023年)."""
    prior = [p.end() for p in _PRIOR_SUBJECT.finditer(clause)]
    return bool(prior) and not _THIS_SUBJECT.search(clause, prior[-1])


def _prior_profit(text: str, t: str, profit_at: tuple[int, int] | None) -> Reading | None:
    """Last year's net profit as the prose states it: right after this year's (``净利润-1.2亿元，上年同期为
    -0.8亿元``: quoted from this year's figure on), else the first statement that names it
    (``上年同期归母净利润为-0.8亿元``, ``去年同期亏损0.8亿元``). A loss is a negative profit."""
    m = _AFTER_PROFIT.match(t[profit_at[1] :]) if profit_at else None
    if m is not None:
        start, end, loss = profit_at[0], profit_at[1] + m.end(), m.group("loss")
    elif (m := next((p for p in _PRIOR_PROFIT.finditer(t) if _reported(t, p)), None)) is not None:
        start, end, loss = m.start(), m.end(), m.group("loss") or m.group("loss2")
    elif profit_at is not None and (m := _named_prior(t, profit_at)) is not None:
        start, end, loss = m.start(), m.end(), m.group("loss")
    else:
        return None
    value, currency = _money(m)
    if loss and value is not None:
        value = -abs(value)
    return _reading(text, "net_profit_prev", value, start, end, currency)


def _named_prior(t: str, profit_at: tuple[int, int]) -> re.Match | None:
    """Last year's profit stated under its year, where this year's is stated under its own (``2023年亏损1.2
    亿元，2022年亏损0.8亿元``, ``2023年净利润为-1.2亿元，2022年为-0.8亿元``): the year just before this year's
    figure names this year, and a clause naming the year before states last year's (a loss is negative);
    a balance at the year's end (``2017年末累计未弥补亏损``) is no year's profit."""
    named = list(re.finditer(r"((?:19|20)\d{2})年度?", t[max(0, profit_at[0] - 16) : profit_at[0]]))
    if not named:
        return None
    prior = int(named[-1].group(1)) - 1
    other = "收入|营收|毛利|资产|现金|扣除|扣非|分红|股|累计|未弥补|余额"
    pattern = (rf"{prior}年度?(?![末初底])(?:(?!{other})[^。；;，,]){{0,16}}?"
               rf"(?:(?P<loss>(?:净)?亏损)|(?:{_LABELS['net_profit']}){_GAP}|为)(?P<n>{_NUM}){_MONEY}")
    return re.compile(pattern).search(t, profit_at[1])


@functools.lru_cache(maxsize=16)
def _money_patterns(name: str) -> tuple[re.Pattern, ...]:
    label, num = _LABELS[name], f"(?P<n>{_NUM})"
    return (
        re.compile(f"(?P<label>{label}){_GAP}{num}{_MONEY}{_GROWTH}"),  # 归母净利润1.26亿元，同比增长8%
        # 收入/归母净利润35.9/10.1亿元: the figure at the label's place in the list
        re.compile(f"(?P<labels>(?:[^\\d,，。;；:：/]{{1,8}}/)+(?:{label})){_GAP}(?P<list>{_NUM}(?:/{_NUM})+){_MONEY}"),
        # 归母净利同增60.98%至2.90亿元
        re.compile(f"(?P<label>{label})(?:同比)?(?:同增|同减|增长|下降|减少|上升)\\d+(?:\\.\\d+)?%至{num}{_MONEY}"),
    )


@functools.lru_cache(maxsize=16)
def _listed(name: str) -> re.Pattern:
    """What every match of ``name``'s list pattern holds: a ``/`` right before the label. A text without it
    (an annual report, mostly) is not scanned with that pattern, whose every start tries a run of labels."""
    return re.compile(f"/(?:{_LABELS[name]})")


def _first_money(t: str, name: str) -> tuple[re.Match, float | None, str] | None:
    """The earliest reported money figure for ``name``: (match, value in 亿元, currency)."""
    best: tuple[re.Match, float | None, str] | None = None
    for pattern in _money_patterns(name):
        if "list" in pattern.groupindex and not _listed(name).search(t):
            continue
        for m in pattern.finditer(t):
            if best is not None and m.start() >= best[0].start():
                break
            if not _reported(t, m):
                continue
            if "list" in pattern.groupindex:
                labels, numbers = m.group("labels").split("/"), m.group("list").split("/")
                if len(labels) != len(numbers) or not re.fullmatch(_LABELS[name], labels[-1]):
                    continue
                value, currency = _money(m, number=numbers[-1])
            else:
                value, currency = _money(m)
            best = (m, value, currency)
            break
    return best


_SHARES = re.compile(r"(?:总股本|股本总数|总股数)" + _GAP + r"(?P<n>" + _NUM + r")(?P<scale>亿|万)?股")


@read_once
def read_shares(text: str) -> Reading | None:
    """The share count a text states (``总股本12.56亿股``), in 亿股, with its quote."""
    m = _SHARES.search(normalize(text))
    if m is None:
        return None
    scale = {"亿": 1.0, "万": 1e-4, None: 1e-8}[m.group("scale")]
    return _reading(text, "shares", round(_number(m.group("n")) * scale, 10), m.start(), m.end())


# A loss that is not the company's own result: a minority's share, losses carried forward, an
# onerous contract, standard lines of the statements (「子公司少数股东分担的当期亏损」).
_OTHERS_LOSS_BEFORE = re.compile(r"(少数股东|分担|弥补|抵扣|抵减|结转|承担|超额|联营|合营|参股|被投资|以前年度|累计"
                                 r"|可能|若|如果|风险|避免|减少)[^，。；,;：:]{0,10}$")
# after the word: "(亏损以“-”号填列)" is a line label of the statements, 亏损合同 an onerous contract
_OTHERS_LOSS_AFTER = re.compile(r"^(合同|准备|风险|的风险|(?:总)?额|(?:总额)?以|的子公司)")


def _own(t: str, m: re.Match) -> bool:
    """A loss of the company's own, this year: not of others, nor last year's (``上年同期亏损0.8亿元``), nor a
    forecast's (``预计2018年度…净利润为亏损21亿元``)."""
    last_year = m.group(0).startswith(("亏损", "净亏损")) and _PRIOR_LOSS_BEFORE.search(t[max(0, m.start() - 40) :
                                                                                         m.start()])
    clause = _clause(t, m.start())
    return not (last_year or _OTHERS_LOSS_BEFORE.search(t[max(0, m.start() - 16) : m.start()])
                or _OTHERS_LOSS_AFTER.match(t[m.end() : m.end() + 5]) or _FORECAST.search(clause))


def _own_loss(t: str) -> re.Match | None:
    return next((m for m in _LOSS.finditer(t) if _own(t, m)), None)


@read_once
def loss_statement(text: str) -> str | None:
    """The words by which ``text`` states the company's own loss with its figure (``亏损3152.1万港元``),
    if it does; a loss of others (a minority's share, losses carried forward) is not one, nor a loss
    word without its figure (``出现亏损`` of a segment, a risk, a year before: the flag 亏损 comes from
    figures, never from a loose word). A statement of the result's sign in words (``由盈转亏``,
    ``净利润为负``) counts when its clause names no one else (a subsidiary, a segment)."""
    t = normalize(text)
    m = _own_loss(t) or next((w for w in _RESULT_WORDS.finditer(t) if _own(t, w) and not _OTHERS_CLAUSE.search(
        t[max(t.rfind(p, 0, w.start()) for p in "，。；,;：:\n") + 1 : w.start()])), None)
    if m is None:
        return None
    clause = max(t.rfind(p, 0, m.start()) for p in "，。；,;：:")  # from the start of its clause
    start = max(clause + 1, m.start() - 12)
    return t[start : m.end()]


def in_text(text: str, quote: str) -> bool:
    """Whether ``quote`` occurs in ``text``, whitespace and width aside (at least two characters)."""
    q = normalize(quote)
    return len(q) >= 2 and q in normalize(text)


def only_read_figures(text: str, quote: str) -> bool:
    """Whether ``quote`` states numbers (years aside) and every one of them is in a statement code
    read from ``text``: a figure already read and checked, which by itself contradicts nothing."""
    numbers = re.findall(_NUM + r"(?![\d年])", normalize(quote))
    read = normalize("".join(r.quote for r in _read_figures(text).values()))
    return bool(numbers) and all(n in read for n in numbers)


# the words that name each figure's item: a quote is its evidence only where they stand with its number
ITEM_WORDS: dict[str, re.Pattern[str]] = {
    "revenue": re.compile(r"营业(?:总)?收入|营收|收入|销售额"),
    "revenue_growth": re.compile(r"营业(?:总)?收入|营收|收入|销售额"),
    "net_profit": re.compile(r"净利润|净利|利润|亏损|盈利"),
    "net_profit_growth": re.compile(r"净利润|净利|利润"),
    "gross_margin": re.compile(r"毛利率"),
    "net_margin": re.compile(r"净利率|净利润率"),
    "roe": re.compile(r"净资产收益率|ROE", re.I),
    "eps": re.compile(r"每股收益|每股盈利|每股净?收益|EPS", re.I),
}
_CLAUSE = re.compile(r"[，,；;。、]")


def quote_names(text: str, quote: str, name: str, value: float, unit: str) -> bool:
    """Whether ``quote`` states ``value`` as the figure ``name``: a clause of it (between commas) names the
    figure's item and states the value (``quote_supports``). 净利润747亿元 is no evidence of revenue, nor
    净利润同比增长12% of revenue growth, though the number is in the text."""
    words = ITEM_WORDS.get(name)
    if words is None:
        return quote_supports(text, quote, value, unit)
    if not in_text(text, quote):
        return False
    clauses = [c for c in _CLAUSE.split(quote) if c.strip()]
    for i, clause in enumerate(clauses):
        if not quote_supports(text, clause, value, unit):
            continue
        if words.search(clause):
            return True
        # 营业收入1505.60亿元，同比增长18.04%: a clause that names no item takes the one before it
        if i and not any(w.search(clause) for w in ITEM_WORDS.values()) and words.search(clauses[i - 1]):
            return True
    return False


def quote_supports(text: str, quote: str, value: float, unit: str) -> bool:
    """Whether ``quote`` occurs in ``text`` (whitespace and width aside) and states ``value``
    (in ``unit``): one of its numbers, scaled by the unit written next to it, is the value."""
    if not in_text(text, quote):
        return False
    q = normalize(quote)
    for m in re.finditer(f"(?P<n>{_NUM})(?P<u>百万元?|千元|万元?|亿元?|元/股|元|%)?", q):
        number = _number(m.group("n"))
        loss = "亏损" in q[: m.start()] and number > 0
        u = m.group("u")
        for candidate in (number, -number) if loss else (number,):
            written = (u if u.endswith(("元", "%", "股")) else u + "元") if u else unit  # "0.92亿": 元 left out
            converted = convert(candidate, written, unit)
            if converted is not None and abs(converted - value) <= 1e-6 * max(1.0, abs(value)):
                return True
    return False


def readings(text: str) -> dict[str, Any]:
    """What code reads of ``text`` (as a row holds it: stripped), made in a report reader process and
    sent with the text: a ``Document(text, readings)`` in the process that asks the engine scans the
    whole text for none of them again (its key-figure tables, prose figures, segments, normalized text
    and where its whitespace was, the figures it names, its share count, its own dates, where its
    sections begin); what combines them, a lookup or two, is made there."""
    doc = with_readings(text, None)
    # the scans of the whole text (what combines them is left to the asking process, which waits on the
    # readers); the folded text only serves the last two, so it is not sent: one copy of the text fewer
    # in the pipe, the disk store and the memory of every row waiting for its answer
    for read in (read_key_tables, _read_prose, read_segments, normalize, _whitespace_runs, named_figures,
                 read_shares, report_dates, section_starts):
        read(doc)
    made = doc.readings
    made.pop(_folded.__name__, None)
    return made


@read_once
def report_dates(text: str) -> periods.ReportDates:
    """What a report's text says of its period and the day it was approved (``periods.from_text``: scans
    of the whole text), read once per ``Document``."""
    return periods.from_text(text)


def with_readings(text: str, made: dict[str, Any] | None) -> Document:
    """``text`` as a row holds it (stripped), carrying the readings ``made`` of it (``readings``, in a report
    reader process); ``None``: none yet (each is made when first asked for)."""
    return Document(text.strip(), made)


def readings_version() -> str:
    """The version of the code that reads figures (a digest of its source): readings kept on disk
    are used only by the same code."""
    import hashlib
    from pathlib import Path

    from . import document, sections, tables

    digest = hashlib.sha256()
    for module in (tables.__file__, __file__, document.__file__, periods.__file__, sections.__file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()[:16]
