"""Industries compared: for each industry, the count, median and range of every figure read.

One table, tidy (a row per industry, figure and period), for the report's Summary sheet and for
pandas (``xladdin.compare(result_df, by="行业")``): both come from ``figure_table``, so the sheet
and the DataFrame give the same numbers. A figure read for two years gives a row per year, so a
trend is visible: gross margin (from the 合并利润表), revenue, net profit, ROE and EPS, this year's and
the prior year's from an annual report's key-figure tables. Only figures code or the audit let
through are in a result: nothing unverified is compared.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel

NO_INDUSTRY = "(未填)"
THIS_YEAR, PRIOR_YEAR = "本期 this year", "上期 prior year"
# result field → (the figure's name in the table, its period)
COMPARED: dict[str, tuple[str, str]] = {
    "gross_margin": ("毛利率(%) gross margin", THIS_YEAR),
    "gross_margin_prev": ("毛利率(%) gross margin", PRIOR_YEAR),
    "net_margin": ("净利率(%) net margin", THIS_YEAR),
    "revenue_growth": ("营收增长(%) revenue growth", THIS_YEAR),
    "net_profit_growth": ("净利增长(%) profit growth", THIS_YEAR),
    "revenue": ("营收(亿元) revenue", THIS_YEAR),
    "revenue_prev_text": ("营收(亿元) revenue", PRIOR_YEAR),
    "net_profit": ("净利润(亿元) net profit", THIS_YEAR),
    "net_profit_prev_text": ("净利润(亿元) net profit", PRIOR_YEAR),
    "roe_text": ("ROE(%)", THIS_YEAR),
    "roe_prev_text": ("ROE(%)", PRIOR_YEAR),
    "eps_text": ("EPS(元)", THIS_YEAR),
    "eps_prev_text": ("EPS(元)", PRIOR_YEAR),
}
HEADER = ["行业 industry", "指标 figure", "期间 period", "数量 count", "中位数 median", "最小 min", "最大 max"]


def industry_name(value: Any) -> str:
    """An industry cell as the table names it (blank, NaN: ``NO_INDUSTRY``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or not str(value).strip():
        return NO_INDUSTRY
    return str(value).strip()


def figure_table(rows: Iterable[tuple[Any, dict[str, Any]]]) -> list[list[Any]]:
    """Rows of ``HEADER`` from (industry, {result field: value}) pairs; industries by number of rows,
    then name; figures in ``COMPARED`` order; a figure no row of an industry has is left out."""
    values: dict[tuple[str, str], list[float]] = {}
    sizes: dict[str, int] = {}
    for industry, figures in rows:
        name = industry_name(industry)
        sizes[name] = sizes.get(name, 0) + 1
        for field in COMPARED:
            v = figures.get(field)
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                values.setdefault((name, field), []).append(float(v))
    out = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        for field, (label, period) in COMPARED.items():
            found = values.get((name, field))
            if found:
                out.append([name, label, period, len(found), round(statistics.median(found), 4),
                            round(min(found), 4), round(max(found), 4)])
    return out


def from_results(industries: Sequence[Any], results: Sequence[Any]) -> list[list[Any]]:
    """The table for screened rows (a row that is an error has no figures, and is not counted)."""
    return figure_table((ind, res.model_dump()) for ind, res in zip(industries, results, strict=True)
                        if isinstance(res, BaseModel))


def chart_figure(table: list[list[Any]]) -> str | None:
    """The figure an analyst would chart across industries: gross margin when any row has it, else the
    this-year figure read for the most industries."""
    this_year = [r for r in table if r[2] == THIS_YEAR]
    if not this_year:
        return None
    labels = [r[1] for r in this_year]
    if COMPARED["gross_margin"][0] in labels:
        return COMPARED["gross_margin"][0]
    return max(dict.fromkeys(labels), key=labels.count)
