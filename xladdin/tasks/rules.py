"""Screening rules as data: risk level, score and flags computed exactly in code.

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


class RiskLevel(StrEnum):
    HIGH = "高"
    MEDIUM = "中"
    LOW = "低"


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
