"""Industries and companies compared over the years: each figure under the period it is of.

A result's figures are of its report's period (``报告期``: ``2019年度``), the key-figure table's prior
column of the period a year before (``2018年度``); a text without a known period keeps this year and
last apart as ``本期`` and ``上期``. From one table, tidy (a row per industry, figure and period: count,
median and range), the report's Summary sheet, ``xladdin compare`` and pandas
(``xladdin.compare(result_df)``) give the same numbers; ``by_period`` lays it out with a column per
period and the change from the one before (a ratio's in percentage points; only between consecutive
periods, and for an industry only where both medians hold as many companies), and ``trend_table``
does the same per company, so several reports of one company make its trend. Only figures code or
the audit let through are in a result: nothing unverified is compared.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel

from ..periods import Period, parse_period

NO_INDUSTRY = "(未填)"
THIS_YEAR, PRIOR_YEAR = "本期 this year", "上期 prior year"  # a text whose period is not known
CHANGE = "变化 change"
# result field → (the figure's name in the table, years before the report's period)
COMPARED: dict[str, tuple[str, int]] = {
    "gross_margin": ("毛利率(%) gross margin", 0),
    "gross_margin_prev": ("毛利率(%) gross margin", 1),
    "net_margin": ("净利率(%) net margin", 0),
    "revenue_growth": ("营收增长(%) revenue growth", 0),
    "net_profit_growth": ("净利增长(%) profit growth", 0),
    "revenue": ("营收(亿元) revenue", 0),
    "revenue_prev_text": ("营收(亿元) revenue", 1),
    "net_profit": ("净利润(亿元) net profit", 0),
    "net_profit_prev_text": ("净利润(亿元) net profit", 1),
    "roe_text": ("ROE(%)", 0),
    "roe_prev_text": ("ROE(%)", 1),
    "eps_text": ("EPS(元)", 0),
    "eps_prev_text": ("EPS(元)", 1),
}
FIGURE_ORDER = list(dict.fromkeys(label for label, _ in COMPARED.values()))
HEADER = ["行业 industry", "指标 figure", "期间 period", "数量 count", "中位数 median", "最小 min", "最大 max"]


def industry_name(value: Any) -> str:
    """An industry cell as the table names it (blank, NaN: ``NO_INDUSTRY``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or not str(value).strip():
        return NO_INDUSTRY
    return str(value).strip()


def periods(label: Any) -> tuple[str, str]:
    """The periods a result's figures are of: its report's (``2019年度``) and the one a year before
    (``2018年度``); ``本期``/``上期`` when the period is not known."""
    p = parse_period(label) if label not in (None, "") else None
    if p is None:
        return THIS_YEAR, PRIOR_YEAR
    return p.label, Period(p.year - 1, p.kind).label


def _order(label: str) -> tuple[int, int, int]:
    """Periods oldest first; those not known (本期, 上期) after every known one, 上期 before 本期."""
    p = parse_period(label)
    if p is None:
        return (1, 0 if label == PRIOR_YEAR else 1, 0)
    return (0, *p.order)


def _figure(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _placed(period: Any, figures: dict[str, Any]) -> Iterable[tuple[str, str, float, int]]:
    """(figure, period, value, years back) of each figure of one result."""
    keys = periods(period)
    for field, (label, back) in COMPARED.items():
        v = _figure(figures.get(field))
        if v is not None:
            yield label, keys[back], v, back


def _per_company(rows: Iterable[tuple[Any, Any, dict[str, Any]]]) -> dict[tuple[Any, str, str], float]:
    """One value per company, figure and period from (company, period, figures) rows: a period's own
    report first (a later report's prior-year column may be restated), else the first given."""
    best: dict[tuple[Any, str, str], tuple[int, float]] = {}
    for company, period, figures in rows:
        for label, key, v, back in _placed(period, figures):
            if (company, label, key) not in best or back < best[(company, label, key)][0]:
                best[(company, label, key)] = (back, v)
    return {k: v for k, (_, v) in best.items()}


def figure_table(rows: Iterable[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows of ``HEADER`` from (industry, period, {result field: value}[, company]); industries by number of
    rows, then name; figures in ``COMPARED`` order, each period oldest first; one no row has is left out.
    With its company, a row counts once per figure and period (``_per_company``: several reports of one
    company give one value a year)."""
    sizes: dict[str, int] = {}
    industry_of: dict[Any, str] = {}
    given = []
    for i, (industry, period, figures, *company) in enumerate(rows):
        name = industry_name(industry)
        sizes[name] = sizes.get(name, 0) + 1
        who = company[0] if company and company[0] not in (None, "") else ("row", i)  # no company: each row
        industry_of.setdefault(who, name)
        given.append((who, period, figures))
    values: dict[tuple[str, str, str], list[float]] = {}
    for (who, label, key), v in _per_company(given).items():
        values.setdefault((industry_of[who], label, key), []).append(v)
    out = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        for label in FIGURE_ORDER:
            keys = sorted({k for (n, f, k) in values if n == name and f == label}, key=_order)
            for key in keys:
                found = values[(name, label, key)]
                out.append([name, label, key, len(found), round(statistics.median(found), 4),
                            round(min(found), 4), round(max(found), 4)])
    return out


def by_period(table: list[list[Any]]) -> tuple[list[str], list[list[Any]]]:
    """``figure_table``'s medians with a column per period (oldest first) and the change from the period
    before the last (a ratio's in percentage points): header and rows, a row per industry and figure."""
    keys = sorted({r[2] for r in table}, key=_order)
    grid: dict[tuple[str, str], dict[str, float]] = {}
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for industry, label, key, n, median, _, _ in table:
        grid.setdefault((industry, label), {})[key] = median
        counts.setdefault((industry, label), {})[key] = n
    rows = [[industry, label, *(found.get(k) for k in keys), _change(found, keys, counts[(industry, label)])]
            for (industry, label), found in grid.items()]
    return ["行业 industry", "指标 figure", *keys, CHANGE], rows


def consecutive(before: str, after: str) -> bool:
    """Whether period ``after`` directly follows ``before`` (2018年度 after 2017年度; 本期 after 上期): a change
    is never taken across a gap (2016 to 2018 is no year's change)."""
    if (before, after) == (PRIOR_YEAR, THIS_YEAR):
        return True
    a, b = parse_period(before), parse_period(after)
    return a is not None and b is not None and a.kind == b.kind and b.year == a.year + 1


def _change(found: dict[str, float], keys: list[str], counts: dict[str, int] | None = None) -> float | None:
    """The last period's value less the one before, when they are consecutive periods and (for an industry's
    medians, ``counts``) of as many companies: a median that companies entered or left is no change."""
    shown = [k for k in keys if k in found]
    if len(shown) < 2 or not consecutive(shown[-2], shown[-1]):
        return None
    if counts is not None and counts.get(shown[-1]) != counts.get(shown[-2]):
        return None
    return round(found[shown[-1]] - found[shown[-2]], 4)


def trend_table(rows: Iterable[tuple[Any, Any, Any, dict[str, Any]]]) -> tuple[list[str], list[list[Any]]]:
    """Each company's figures with a column per period (oldest first) and the change from the one
    before: from (code, name, period, {result field: value}) of every report read, several a company
    (``_per_company``)."""
    given = [(str(code or "").strip(), name, period, figures) for code, name, period, figures in rows]
    names: dict[str, str] = {}
    for code, name, _, _ in given:
        if code:
            names.setdefault(code, str(name or ""))
    values: dict[tuple[str, str], dict[str, float]] = {}
    for (code, label, key), v in _per_company((code, period, figures) for code, _, period, figures in given
                                              if code).items():
        values.setdefault((code, label), {})[key] = v
    keys = sorted({k for found in values.values() for k in found}, key=_order)
    out = []
    for code in sorted(names):
        for label in FIGURE_ORDER:
            found = values.get((code, label), {})
            if found:
                out.append([code, names[code], label, *(found.get(k) for k in keys), _change(found, keys)])
    return ["代码 code", "名称 name", "指标 figure", *keys, CHANGE], out


def from_results(industries: Sequence[Any], results: Sequence[Any]) -> list[list[Any]]:
    """The table for screened rows (a row that is an error has no figures, and is not counted)."""
    return figure_table((ind, res.period, res.model_dump()) for ind, res in zip(industries, results, strict=True)
                        if isinstance(res, BaseModel))


def chart_figure(table: list[list[Any]]) -> str | None:
    """The figure an analyst would chart across industries: gross margin when any row has it, else the
    figure read for the most industries."""
    labels = [r[1] for r in table]
    if not labels:
        return None
    if COMPARED["gross_margin"][0] in labels:
        return COMPARED["gross_margin"][0]
    return max(dict.fromkeys(labels), key=labels.count)
