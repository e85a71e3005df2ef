"""Code checks every figure before it is shown or used.

1. What code reads itself (``figures.read_figures``) comes first, with its quote.
2. A figure the model read counts only when its quote is in the text and states that number;
   otherwise it is flagged 不可溯源, shown as blank, and kept out of every cross-check.
3. Code and model disagreeing on a figure, figures that contradict one another (growth vs the
   current and prior profit, net margin vs profit ÷ revenue, EPS vs profit ÷ the share count the
   text states) → 数据存疑 with the numbers.
4. A text that reports a loss sets 亏损, whatever the model said; a positive PE-TTM or ROE given beside
   it is 数据存疑 (``loss_against_fields``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..reading.figures import (
    FIGURES,
    TABLE_FIGURES,
    Reading,
    convert,
    loss_statement,
    quote_supports,
    read_figures,
    read_shares,
    second_source,
    split_figure,
    table_notes,
    table_prose_conflicts,
    withheld_figures,
)
from ..reading.tables import Segment, read_key_tables, read_segments, read_tables
from .rules import Flag, relative_gap

GROWTH_TOLERANCE_PP = 5.0  # percent points between a stated growth and the one its figures imply
MARGIN_TOLERANCE = 0.10  # relative gap between a stated net margin and profit ÷ revenue (or EPS and profit ÷ shares)


@dataclass
class Audit:
    values: dict[str, float | None] = field(default_factory=dict)  # FIGURES / TABLE_FIGURES name → value
    quotes: dict[str, str] = field(default_factory=dict)
    pages: dict[str, int] = field(default_factory=dict)
    flags: set[Flag] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    loss: str | None = None  # the words (or the figure's quote) by which the text reports a loss
    segments: tuple[Segment, ...] = ()  # the 主营业务分行业 / 分产品 rows: segments' margins, never the company's
    second: dict[str, tuple[str, int | None]] = field(default_factory=dict)  # name → a statement's quote, page
    # stating the same figure as the key-figure table (checked twice)

    def doubt(self, note: str) -> None:
        self.flags.add(Flag.DOUBTFUL)
        self.notes.append(note)

    def evidence(self) -> str:
        labels = {**FIGURES, **TABLE_FIGURES}
        figures = [f"{labels[n][0]}「{q}」" + (f"(第{self.pages[n]}页)" if n in self.pages else "")
                   + (f" ={self.second[n][0]}" + (f"(第{self.second[n][1]}页)" if self.second[n][1] else "")
                      if n in self.second else "")
                   for n, q in self.quotes.items()]
        segments = [f"{s.kind}毛利率「{s.quote}」" + (f"(第{s.page}页)" if s.page else "") for s in self.segments]
        return "; ".join(figures + segments)


def audit_figures(text: str, model: dict[str, tuple[str, str] | None], tolerance: float,
                  net_profit_prev: float | None = None) -> Audit:
    """Verified figures of ``text``: ``model`` maps a FIGURES name to the model's (``number+unit``,
    quote) or ``None``; ``net_profit_prev`` (亿元, a given field) lets growth be checked."""
    a = Audit()
    if not text:  # a row without a report: nothing read, and no quote a model's figure could stand on
        return _without_text(a, model)
    code = read_figures(text)
    withheld = withheld_figures(text)
    untraced: list[str] = []
    for name, (label, unit) in FIGURES.items():
        read = model.get(name)
        if name in withheld:  # code cannot place it exactly: missing, with the reason, never guessed
            a.values[name] = None
            a.notes.append(f"缺{label}: {withheld[name]}")
            continue
        model_value = None
        if read is not None:
            number, written = split_figure(read[0])
            model_value = convert(number, written, unit, digits=6)
            if model_value is None or not quote_supports(text, read[1], model_value, unit):
                a.flags.add(Flag.UNTRACEABLE)
                untraced.append(f"{label}{read[0]}「{read[1][:12]}」")
                model_value = None
        found = code.get(name)
        if found is not None and found.value is None:
            a.notes.append(f"{label}: 以{found.currency}计, 未换算为人民币「{found.quote}」")
            a.values[name] = None
            continue
        if found is not None:
            a.values[name], a.quotes[name] = found.value, found.quote
            if found.page is not None:
                a.pages[name] = found.page
            if model_value is not None and relative_gap(model_value, found.value) > tolerance:
                # another line than code's (a segment's, last year's, a forecast's): the model's is unread,
                # no conflict; 数据存疑 is for two statements of the same line that disagree
                a.notes.append(f"{label}: 模型读{model_value:g}「{read[1][:20]}」, "
                               f"与程序所读{found.value:g}不是同一项, 未采用")
        elif model_value is not None and read is not None:
            a.values[name], a.quotes[name] = model_value, read[1]
        else:
            a.values[name] = None
    if untraced:
        a.notes.append("模型读数在原文中找不到出处, 未采用: " + ", ".join(untraced))
    for name in TABLE_FIGURES:
        found = code.get(name)
        if found is None and name in withheld:
            a.notes.append(f"缺{TABLE_FIGURES[name][0]}: {withheld[name]}")
        if found is not None and found.value is None:
            a.notes.append(f"{TABLE_FIGURES[name][0]}: 以{found.currency}计, 未换算为人民币「{found.quote}」")
        a.values[name] = found.value if found is not None else None
        if found is not None:
            a.quotes[name] = found.quote
            if found.page is not None:
                a.pages[name] = found.page
    a.notes.extend(table_notes(text))
    a.segments, left = read_segments(text)
    a.notes.extend(left)
    tables = read_key_tables(text)
    if not a.segments and not left and tables.found and not tables.bank:  # an annual report: say why none
        a.notes.append("缺分行业毛利率: 未读到主营业务分行业/分产品表(营业收入、营业成本、毛利率与单位)")
    for name, row, st, agree in second_source(text):
        label = {**FIGURES, **TABLE_FIGURES}[name][0]
        if agree:
            a.second[name] = (f"{st.statement}「{st.quote}」", st.page)
        else:
            a.doubt(f"{label}: 表格{row.current:g}「{row.quote[:30]}」 vs "
                    f"{st.statement}{st.current:g}「{st.quote[:30]}」")
    for name, table, prose in table_prose_conflicts(text, tolerance):
        a.doubt(f"{FIGURES[name][0]}: 表格{table.value:g}「{table.quote[:30]}」 vs "
                f"正文{prose.value:g}「{prose.quote[:30]}」")
    profit = a.values.get("net_profit")
    # a report's own table states its result: loss words elsewhere (a subsidiary's, a minority's) do not
    loss = None if "net_profit" in read_tables(text) else loss_statement(text)
    if loss or (profit is not None and profit < 0):
        a.loss = loss or a.quotes["net_profit"]
        a.flags.add(Flag.LOSS)
        a.notes.append(f"文本报告亏损「{a.loss}」")
    if net_profit_prev is None:
        net_profit_prev = a.values.get("net_profit_prev")
    _consistency(a, net_profit_prev, read_shares(text))
    return a


def _without_text(a: Audit, model: dict[str, tuple[str, str] | None]) -> Audit:
    """``audit_figures`` of an empty text: every figure blank, a figure the model gave anyway 不可溯源."""
    a.values = dict.fromkeys((*FIGURES, *TABLE_FIGURES))
    untraced = [f"{FIGURES[name][0]}{read[0]}「{read[1][:12]}」" for name, read in model.items()
                if read is not None and name in FIGURES]
    if untraced:
        a.flags.add(Flag.UNTRACEABLE)
        a.notes.append("模型读数在原文中找不到出处, 未采用: " + ", ".join(untraced))
    return a


def _consistency(a: Audit, net_profit_prev: float | None, shares: Reading | None) -> None:
    v = a.values
    profit, growth = v.get("net_profit"), v.get("net_profit_growth")
    if profit is not None and growth is not None and net_profit_prev:
        implied = (profit - net_profit_prev) / abs(net_profit_prev) * 100
        if abs(implied - growth) > GROWTH_TOLERANCE_PP:
            a.doubt(f"净利增长: 文本{growth:g}% vs 按净利润{profit:g}/上年{net_profit_prev:g}算得{implied:.1f}%")
    revenue, margin = v.get("revenue"), v.get("net_margin")
    if profit is not None and revenue and margin is not None:
        implied = profit / revenue * 100
        if relative_gap(implied, margin) > MARGIN_TOLERANCE and abs(implied - margin) > 1.0:
            a.doubt(f"净利率: 文本{margin:g}% vs 净利润÷营收{implied:.1f}%")
    eps = v.get("eps")
    # a table's EPS is on the year's weighted shares: the year-end share count is another figure
    if profit is not None and eps is not None and shares is not None and shares.value and "eps" not in a.pages:
        implied = profit / shares.value  # 亿元 ÷ 亿股 = 元/股
        if relative_gap(implied, eps) > MARGIN_TOLERANCE and abs(implied - eps) > 0.01:
            a.doubt(f"EPS: 文本{eps:g}元 vs 净利润÷总股本{implied:.2f}元「{shares.quote}」")


def loss_against_fields(a: Audit, pe_ttm: float | None, roe: float | None, net_profit: float | None) -> None:
    """A loss the text reports (or the given net profit, negative) beside a positive PE-TTM or ROE given
    for the row: they cannot both be right, so the row is 数据存疑 with the numbers."""
    if a.loss is not None:
        where = f"文本报告亏损「{a.loss}」"
    elif net_profit is not None and net_profit < 0:
        where = f"净利润字段为{net_profit:g}亿元(亏损)"
    else:
        return
    if pe_ttm is not None and pe_ttm > 0:
        a.doubt(f"PE-TTM {pe_ttm:g}为正, 但{where}: 亏损时PE-TTM应≤0")
    if roe is not None and roe > 0:
        a.doubt(f"ROE {roe:g}%为正, 但{where}: 亏损时ROE应≤0")
