"""The rules computed in code: a row's risk level, score and flags (``assess``, its ``Rules`` as data),
and the audit of every figure against its quote (``audit_figures``, below).

The model never decides the risk level or the score. ``Rules`` holds every
threshold and weight, so a workbook's Rules sheet (or a TOML file) can override
them; ``assess`` applies them to the given fields.

Defaults:
  高  ROE < 5%, or net profit negative two years running, or ST / *ST
  中  5% ≤ ROE < 15%, or PE-TTM > 50
  低  ROE ≥ 15% and PE-TTM ≤ 50 and not ST
  score = clamp(round(100 − PE_TTM/100×20 − (15 − ROE)×5), 0, 100)
  PE-TTM ≤ 0 is a trailing loss: flag 亏损, and score/rank it as PE-TTM = 100.
  One of the two missing, the score is still given, the missing one taken at its bound (said in the
  basis): PE-TTM at the PE limit (50; at 100 when the net profit is negative), ROE at the 高 bound
  (5%). So a row read from its report alone (no PE) is scored on what the report gives; with
  neither, no score, and the note says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..reading.figures import (
    FIGURES,
    TABLE_FIGURES,
    Reading,
    convert,
    loss_statement,
    missing_figures,
    quote_names,
    read_figures,
    read_shares,
    second_source,
    split_figure,
    table_notes,
    table_prose_conflicts,
    unit_slip,
    withheld_figures,
)
from ..reading.tables import Segment, read_key_tables, read_segments, read_tables


class RiskLevel(StrEnum):
    HIGH = "高"
    MEDIUM = "中"
    LOW = "低"
    UNRATED = "未评"  # nothing to judge: no ROE, no PE-TTM, no rule of 高 that fires (no score either)


class Flag(StrEnum):
    DOUBTFUL = "数据存疑"
    ST = "ST"
    LOSS = "亏损"
    MISSING = "数据缺失"
    TRIMMED = "文本截断"
    UNTRACEABLE = "不可溯源"  # a figure the model read whose quote is not in the text
    NO_ANSWER = "模型未作答"  # the model's answer failed: the verdict is the rules' and code's alone
    UNDATED = "公告日未知"  # under --as-of: no publication date known for the row's report


class Rules(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _not_a_flag(cls, v: Any) -> Any:
        if isinstance(v, bool):  # TRUE in a Rules range is no threshold (it would be read as 1)
            raise ValueError(f"must be a number, not {v}")
        return v

    roe_high_risk_below: float = Field(5.0, ge=-1000, le=1000, title="ROE below this (%) → 高")
    roe_low_risk_from: float = Field(15.0, ge=-1000, le=1000, title="ROE from this (%) may be 低; below → 中")
    pe_limit: float = Field(50.0, gt=0, le=100_000, title="PE-TTM above this → 中")
    loss_pe: float = Field(100.0, gt=0, le=100_000, title="PE-TTM used for a trailing loss (PE ≤ 0)")
    score_base: float = Field(100.0, ge=0, le=1000, title="score before penalties")
    pe_weight: float = Field(20.0, ge=0, le=1000, title="points per 100 of PE-TTM")
    roe_target: float = Field(15.0, ge=-1000, le=1000, title="ROE (%) with no ROE penalty")
    roe_weight: float = Field(5.0, ge=0, le=1000, title="points per ROE point below target")
    mismatch_tolerance: float = Field(0.05, ge=0, lt=1, title="relative gap text vs field → 数据存疑")

    @model_validator(mode="after")
    def _bands_ordered(self) -> Rules:
        if self.roe_high_risk_below > self.roe_low_risk_from:
            raise ValueError("roe_high_risk_below must not exceed roe_low_risk_from")
        return self


DEFAULT_RULES = Rules()


@dataclass
class Verdict:
    risk_level: RiskLevel
    score: int | None
    basis: str
    flags: set[Flag] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


def _dec(x: float) -> Decimal:
    """The decimal a user sees for ``x``, so that ROUND works on 72.5, not 72.4999…"""
    return Decimal(repr(float(x)))


def _fmt(x: float) -> str:
    return f"{x:g}"


def assess(
    *,
    roe: float | None,
    pe_ttm: float | None,
    is_st: bool,
    net_profit: float | None = None,
    net_profit_prev: float | None = None,
    rules: Rules = DEFAULT_RULES,
) -> Verdict:
    flags: set[Flag] = set()
    notes: list[str] = []
    loss = pe_ttm is not None and pe_ttm <= 0
    pe_eff = rules.loss_pe if loss else pe_ttm
    if loss or (net_profit is not None and net_profit < 0):
        flags.add(Flag.LOSS)
    if is_st:
        flags.add(Flag.ST)
    if roe is None:
        flags.add(Flag.MISSING)
        notes.append("缺ROE: ROE规则未应用")
    if pe_ttm is None:
        flags.add(Flag.MISSING)
        notes.append("缺PE-TTM: PE规则未应用")
    if net_profit is None or net_profit_prev is None:
        notes.append("缺两年净利润: 连续亏损规则未应用")

    high: list[str] = []
    if is_st:
        high.append("ST")
    if roe is not None and roe < rules.roe_high_risk_below:
        high.append(f"ROE {_fmt(roe)}% < {_fmt(rules.roe_high_risk_below)}%")
    if net_profit is not None and net_profit_prev is not None and net_profit < 0 and net_profit_prev < 0:
        high.append("连续两年亏损")

    medium: list[str] = []
    if roe is not None and rules.roe_high_risk_below <= roe < rules.roe_low_risk_from:
        medium.append(f"ROE {_fmt(roe)}% < {_fmt(rules.roe_low_risk_from)}%")
    if pe_eff is not None and pe_eff > rules.pe_limit:
        medium.append(("亏损(PE≤0)" if loss else f"PE-TTM {_fmt(pe_eff)}") + f" > {_fmt(rules.pe_limit)}")

    if high:
        level, basis = RiskLevel.HIGH, "; ".join(high)
    elif medium:
        level, basis = RiskLevel.MEDIUM, "; ".join(medium)
    elif roe is None and pe_ttm is None:  # nothing to judge: a count of 中 would mean nothing
        level, basis = RiskLevel.UNRATED, "未评: 无ROE与PE-TTM (所给字段与报告均无), 无规则可用"
    elif roe is None or pe_ttm is None:
        level, basis = RiskLevel.MEDIUM, "数据缺失, 无法确认低风险"
    else:
        level = RiskLevel.LOW
        basis = f"ROE {_fmt(roe)}% ≥ {_fmt(rules.roe_low_risk_from)}%, PE-TTM {_fmt(pe_ttm)} ≤ {_fmt(rules.pe_limit)}"

    score = None
    if roe is not None or pe_eff is not None:
        taken = []
        if pe_eff is None:  # at the limit, or a loss's PE when the profit is negative
            pe_eff = rules.loss_pe if net_profit is not None and net_profit < 0 else rules.pe_limit
            taken.append(f"PE-TTM按{_fmt(pe_eff)}计")
        if roe is None:
            roe_eff = rules.roe_high_risk_below
            taken.append(f"ROE按{_fmt(roe_eff)}%计")
        else:
            roe_eff = roe
        d = _dec
        raw = (
            d(rules.score_base)
            - d(pe_eff) / 100 * d(rules.pe_weight)
            - (d(rules.roe_target) - d(roe_eff)) * d(rules.roe_weight)
        )
        score = min(100, max(0, int(raw.quantize(Decimal(1), rounding=ROUND_HALF_UP))))
        if taken:
            basis = f"{basis}; 评分{'、'.join(taken)}(缺项取界值)"
    else:
        notes.append("缺ROE和PE-TTM: 未评分")
    return Verdict(level, score, basis, flags, notes)


def relative_gap(text_value: float, field_value: float) -> float:
    """Relative distance of a figure read from text to the given field."""
    if field_value == 0:
        return 0.0 if text_value == 0 else float("inf")
    return abs(text_value - field_value) / abs(field_value)


# Code checks every figure before it is shown or used.
#
# 1. What code reads itself (``figures.read_figures``) comes first, with its quote.
# 2. A figure the model read counts only when its quote is in the text and states that number;
#    otherwise it is flagged 不可溯源, shown as blank, and kept out of every cross-check.
# 3. Code and model disagreeing on a figure, figures that contradict one another (growth vs the
#    current and prior profit, net margin vs profit ÷ revenue, EPS vs profit ÷ the share count the
#    text states) → 数据存疑 with the numbers.
# 4. A text that reports a loss sets 亏损, whatever the model said; a positive PE-TTM or ROE given beside
#    it is 数据存疑 (``loss_against_fields``).

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
            if model_value is None or not quote_names(text, read[1], name, model_value, unit):
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
    labels = {**FIGURES, **TABLE_FIGURES}
    for name, why in missing_figures(text).items():  # every key figure left empty says why
        said = f"缺{labels[name][0]}: "
        if a.values.get(name) is None and not any(n.startswith(said) for n in a.notes):
            a.notes.append(said + why)
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
            continue
        said = f"{label}: 表格{row.current:g}「{row.quote[:30]}」 vs {st.statement}{st.current:g}「{st.quote[:30]}」"
        if (times := unit_slip(row.current, st.current)) is None:
            a.doubt(said)
            continue
        # the same figure a power of ten apart: a unit read wrong (another table's), never a number shown
        for each in (name, f"{name}_prev"):
            if each in a.values and a.quotes.get(each) in (row.quote, row.prior_quote):
                a.values[each] = None
                a.quotes.pop(each, None), a.pages.pop(each, None)
        a.doubt(f"{said}: 相差{times:g}倍, 单位不一致, 未取")
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
