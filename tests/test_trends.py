"""``xladdin compare``: industries and companies over the years, through the CLI — a folder holding
several reports of one company makes its trend (each figure under the period it is of), and the real
annual reports in ``../shared/data`` (when there) give their companies' years as the gold states them."""

from __future__ import annotations

import csv
import json

import openpyxl
import pytest
from kit import run_cli
from test_documents import SHARED

GOLD = SHARED / "annual_reports" / "gold.jsonl"


def annual(year: int, revenue: float, revenue_prev: float, profit: float, profit_prev: float) -> str:
    """An annual report's text: its title (the period) and its key-figure table (万元)."""
    growth = round((revenue - revenue_prev) / revenue_prev * 100, 2)
    return "\n".join([f"{year}年年度报告", "第二节 公司简介和主要财务指标", "(一) 主要会计数据",
                      "单位：万元 币种：人民币",
                      f"主要会计数据 {year}年 {year - 1}年 本期比上年同期增减(%) {year - 2}年",
                      f"营业收入 {revenue:,.2f} {revenue_prev:,.2f} {growth} 40,100.00",
                      f"归属于上市公司股东的净利润 {profit:,.2f} {profit_prev:,.2f} 不适用 2,300.00"])


def sheet(path, name):
    rows = list(openpyxl.load_workbook(path)[name].iter_rows(values_only=True))
    return rows


def compared(tmp_path, files: dict[str, str]) -> None:
    """``xladdin compare`` of a folder of ``files`` (name → text), 甲 and 乙 both 电池, into c.xlsx."""
    reports = tmp_path / "reports"
    reports.mkdir()
    for name, text in files.items():
        (reports / name).write_text(text, encoding="utf-8")
    pool = tmp_path / "pool.csv"
    with pool.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["代码", "名称", "行业"], ["600001", "甲公司", "电池"], ["600002", "乙公司", "电池"]])
    r = run_cli("compare", reports, "-o", tmp_path / "c.xlsx", "--pool", pool, "--no-progress")
    assert r.returncode == 0, r.stderr


def test_a_folder_with_two_years_of_a_company_gives_its_trend_and_the_industries_by_year(tmp_path):
    compared(tmp_path, {"600001_甲公司_2022.txt": annual(2022, 12000, 10000, 1500, 1000),
                        "600001_甲公司_2023.txt": annual(2023, 15000, 12000, 1800, 1500),
                        "600002_乙公司_2023.txt": annual(2023, 30000, 20000, 900, 1200)})
    companies = sheet(tmp_path / "c.xlsx", "Companies")
    assert list(companies[0]) == ["代码 code", "名称 name", "指标 figure", "2021年度", "2022年度", "2023年度",
                                  "变化 change"]
    trend = {(row[0], row[2]): list(row[3:]) for row in companies[1:]}
    assert trend[("600001", "营收(亿元) revenue")] == [1.0, 1.2, 1.5, 0.3]  # both reports: three years
    assert trend[("600002", "净利润(亿元) net profit")] == [None, 0.12, 0.09, -0.03]
    industries = sheet(tmp_path / "c.xlsx", "Industries")
    at = next(i for i, row in enumerate(industries) if row[:2] == ("行业 industry", "指标 figure"))
    assert industries[at][2:6] == ("2021年度", "2022年度", "2023年度", "变化 change")
    medians = {row[1]: row[2:6] for row in industries[at + 1 :] if row[0] == "电池"}
    assert medians["营收(亿元) revenue"] == (1.0, 1.6, 2.25, 0.65)  # 2022: 1.2 and 2.0; 2023: 1.5 and 3.0
    assert len(openpyxl.load_workbook(tmp_path / "c.xlsx")["Industries"]._charts) == 1  # the years side by side
    figures = sheet(tmp_path / "c.xlsx", "Figures")
    assert ("电池", "营收(亿元) revenue", "2022年度", 2, 1.6, 1.2, 2.0) in figures


def test_compare_on_a_relative_folder_with_a_bad_file_passes_it_over_with_its_reason(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "600001_甲公司_2023.txt").write_text(annual(2023, 15000, 12000, 1800, 1500), encoding="utf-8")
    (reports / "600002_乙公司_2023.pdf").write_text("<html><body>404 Not Found</body></html>", encoding="utf-8")
    r = run_cli("compare", "reports/", "-o", "c.xlsx", "--no-progress", cwd=tmp_path)  # as the README writes it
    assert r.returncode == 0, r.stderr
    assert "skipped 600002_乙公司_2023.pdf" in r.stderr and "not a PDF" in r.stderr, r.stderr
    companies = sheet(tmp_path / "c.xlsx", "Companies")
    assert {row[0] for row in companies[1:]} == {"600001"}
    assert sheet(tmp_path / "c.xlsx", "Skipped")[1][0] == "600002_乙公司_2023.pdf"
    assert "1 files passed over" in sheet(tmp_path / "c.xlsx", "Industries")[0][0]


def test_compare_names_a_bad_source_and_output(tmp_path):
    r = run_cli("compare", tmp_path / "none", "-o", tmp_path / "c.xlsx")
    assert r.returncode == 2 and "no such report or folder" in r.stderr
    (tmp_path / "empty").mkdir()
    r = run_cli("compare", tmp_path / "empty", "-o", tmp_path / "c.xlsx")
    assert r.returncode == 2 and "no report files" in r.stderr
    r = run_cli("compare", tmp_path / "empty", "-o", tmp_path / "c.csv")
    assert r.returncode == 2 and "name a .xlsx file" in r.stderr


@pytest.mark.slow
@pytest.mark.skipif(not GOLD.is_file(), reason="../shared/data annual reports not present")
def test_the_real_reports_give_each_company_its_years(tmp_path):
    """国投电力 (seven reports), 华能水电 (five) and 贵州茅台 (two): each year's revenue and profit as the gold
    gives them, the prior-year columns of each report filling the years between."""
    r = run_cli("compare", GOLD.parent, "-o", tmp_path / "c.xlsx", "--no-progress", timeout=900)
    assert r.returncode == 0, r.stderr
    companies = sheet(tmp_path / "c.xlsx", "Companies")
    header = list(companies[0])
    trend = {(row[0], row[2]): dict(zip(header[3:], row[3:], strict=True)) for row in companies[1:]}
    checked = 0
    for line in GOLD.read_text(encoding="utf-8").splitlines():
        g = json.loads(line)
        if g["code"] not in ("600886", "600025", "600519"):
            continue
        period = f"{g['year']}年度"
        for figure, field in (("营收(亿元) revenue", "revenue"), ("净利润(亿元) net profit", "net_profit")):
            assert trend[(g["code"], figure)][period] == pytest.approx(g[field] / 1e8, rel=1e-9), (g["file"], figure)
            checked += 1
    assert checked == 2 * 14
    assert sum(v is not None for v in trend[("600886", "营收(亿元) revenue")].values()) >= 8


def test_a_change_is_between_consecutive_years_of_as_many_companies_never_across_a_gap(tmp_path):
    compared(tmp_path, {"600001_甲公司_2016.txt": annual(2016, 12000, 10000, 1500, 1000),
                        "600001_甲公司_2018.txt": annual(2018, 15000, 14000, 1800, 1700),
                        "600002_乙公司_2018.txt": annual(2018, 30000, 20000, 900, 1200)})
    companies = sheet(tmp_path / "c.xlsx", "Companies")
    header = list(companies[0])
    trend = {(row[0], row[2]): dict(zip(header[3:], row[3:], strict=True)) for row in companies[1:]}
    # revenue: 2017 from the 2018 report's prior column, so 2017 → 2018 is a year's change
    assert trend[("600001", "营收(亿元) revenue")]["变化 change"] == 0.1
    # growth is of its report's year alone: 2016 and 2018, a gap, no change
    growth = trend[("600001", "营收增长(%) revenue growth")]
    assert growth["2016年度"] == 20.0 and growth["2018年度"] == 7.14 and growth["变化 change"] is None
    industries = sheet(tmp_path / "c.xlsx", "Industries")
    at = next(i for i, row in enumerate(industries) if row[:2] == ("行业 industry", "指标 figure"))
    head = list(industries[at])
    medians = {row[1]: dict(zip(head, row, strict=False)) for row in industries[at + 1 :] if row[0] == "电池"}
    assert medians["营收增长(%) revenue growth"]["变化 change"] is None  # 2016 (甲) → 2018 (甲, 乙): a gap
    # revenue: 2017 and 2018 each hold 甲 and 乙; 2016 甲 alone, 2015 甲 alone
    assert medians["营收(亿元) revenue"]["变化 change"] == round((1.5 + 3.0) / 2 - (1.4 + 2.0) / 2, 4)
    assert medians["净利润(亿元) net profit"]["变化 change"] == round((0.18 + 0.09) / 2 - (0.17 + 0.12) / 2, 4)
