"""Industries compared: the report's Summary sheet and ``xladdin.compare`` give the same numbers, from
figures code read in the reports (the tiny test model's own readings never pass the audit)."""

import csv
import os
import statistics

import openpyxl
import pytest
from conftest import TINY_MAX_TOKENS, tiny_settings
from kit import run_cli

import xladdin
from xladdin.jobs.compare import CHANGE, HEADER, PRIOR_YEAR, THIS_YEAR, by_period

pytestmark = pytest.mark.slow


def report_text(revenue: float, revenue_prev: float, profit: float, profit_prev: float) -> str:
    """An annual report's key-figure table (万元), this year and last."""
    growth = round((revenue - revenue_prev) / revenue_prev * 100, 2)
    return "\n".join(["第二节 公司简介和主要财务指标", "(一) 主要会计数据", "单位：万元 币种：人民币",
                      "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
                      f"营业收入 {revenue:,.2f} {revenue_prev:,.2f} {growth} 40,100.00",
                      f"归属于上市公司股东的净利润 {profit:,.2f} {profit_prev:,.2f} 不适用 2,300.00"])


ROWS = [  # code, name, industry, PE-TTM, ROE, report (revenue, prior, profit, prior; 万元)
    ("600001", "光伏甲", "光伏设备", 20, 12, (52310.5, 48002.1, -3120.4, -1050.2)),
    ("600002", "光伏乙", "光伏设备", 30, 8, (81000.0, 90000.0, 2000.0, 4000.0)),
    ("600003", "光伏丙", "光伏设备", 15, 16, (12000.0, 10000.0, 1500.0, 1000.0)),
    ("300001", "锂电甲", "电池", 25, 18, (150000.0, 120000.0, 30000.0, 20000.0)),
    ("300002", "锂电乙", "电池", "abc", 18, (1.0, 1.0, 1.0, 1.0)),  # a bad PE-TTM: an error row, not compared
]


def summary_comparison(path):
    """The comparison of a report's Summary sheet: its header (a column per period) and its rows."""
    rows = list(openpyxl.load_workbook(path)["Summary"].iter_rows(values_only=True))
    start = next(i for i, r in enumerate(rows) if list(r[:2]) == ["行业 industry", "指标 figure"] and CHANGE in r)
    header = list(rows[start][: rows[start].index(CHANGE) + 1])  # the chart's data is beside it
    out = []
    for r in rows[start + 1 :]:
        if r[0] is None:
            break
        out.append(list(r[: len(header)]))
    return header, out


def test_the_summary_sheet_and_compare_agree_industry_by_industry(tiny_model_path, tmp_path):
    pool = tmp_path / "pool.csv"
    with pool.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["代码", "名称", "行业", "市盈率TTM", "ROE(%)", "财报摘要"])
        w.writerows([code, name, ind, pe, roe, report_text(*nums)] for code, name, ind, pe, roe, nums in ROWS)
    env = dict(os.environ, XLADDIN_MODEL=str(tiny_model_path), XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS),
               XLADDIN_CACHE_DIR=str(tmp_path / "cache"))
    r = run_cli("screen", pool, "-o", tmp_path / "r.xlsx", "--no-progress", env=env)
    assert r.returncode == 1, r.stderr  # one error row
    header, sheet = summary_comparison(tmp_path / "r.xlsx")
    assert header == ["行业 industry", "指标 figure", PRIOR_YEAR, THIS_YEAR, CHANGE]  # no period known: 上期, 本期

    # the medians, worked out by hand from the tables above (万元 → 亿元), last year's column first
    def row(industry, figure):
        return next(x for x in sheet if x[:2] == [industry, figure])[2:]

    profit = "净利润(亿元) net profit"
    assert row("光伏设备", profit) == [0.1, 0.15, 0.05]
    assert row("电池", profit) == [2.0, 3.0, 1.0]  # the bad row is not counted
    revenue = "营收(亿元) revenue"
    assert row("光伏设备", revenue) == [4.8002, 5.231, 0.4308]
    growth = [round((a - b) / b * 100, 2) for _, _, ind, _, _, (a, b, _, _) in ROWS if ind == "光伏设备"]
    assert row("光伏设备", "营收增长(%) revenue growth") == [None, round(statistics.median(growth), 4), None]
    assert [x[0] for x in sheet].index("电池") > [x[0] for x in sheet].index("光伏设备")  # larger industry first
    wb = openpyxl.load_workbook(tmp_path / "r.xlsx")
    assert len(wb["Summary"]._charts) == 2  # risk levels, and a figure's median by industry

    import pandas as pd

    df = pd.read_csv(pool, dtype={"代码": str})
    settings = tiny_settings(tmp_path, model=str(tiny_model_path))
    screened = xladdin.screen(df, settings=settings, progress=False)
    compared = xladdin.compare(screened, by="行业")
    assert list(compared.columns) == HEADER
    tidy = compared.values.tolist()
    assert [r[3:] for r in tidy if r[:3] == ["光伏设备", profit, THIS_YEAR]] == [[3, 0.15, -0.312, 0.2]]
    assert by_period(tidy) == (header, sheet)  # the same numbers as the sheet, answered from the cache
    with pytest.raises(xladdin.InputError, match="板块"):
        xladdin.compare(screened, by="板块")
