"""A report people can read (issue 46): through ``xladdin screen``, the Results sheet's money and
ratios show 2 decimals, columns are as wide as what they hold, long text wraps in rows tall enough,
and a note every row carries is said once, on the Run sheet."""

from __future__ import annotations

import csv

import openpyxl
from test_documents import cli


def test_the_results_sheet_is_formatted_and_a_note_on_every_row_is_said_once(tiny_model_path, tmp_path):
    pool = tmp_path / "pool.csv"
    report = ("2023年公司实现营业收入1505.6123亿元，同比增长18.04%；归母净利润747.34亿元，同比增长19.16%；"
              "基本每股收益59.49元，加权平均净资产收益率34.19%。")
    with pool.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["代码", "名称", "行业", "ROE(%)", "财报摘要"],
                                 ["600519", "贵州茅台", "白酒", "34.19", report],
                                 ["000858", "五粮液", "白酒", "25.3", report.replace("1505.6123", "832.7")]])
    r = cli(["screen", str(pool), "-o", str(tmp_path / "r.xlsx")], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr
    wb = openpyxl.load_workbook(tmp_path / "r.xlsx")
    ws = wb["Results"]
    header = [c.value for c in ws[1]]

    def column(title):
        return header.index(title) + 1

    revenue = ws.cell(row=2, column=column("营收(亿元) revenue"))
    assert revenue.value == 1505.6123 and revenue.number_format == "0.00"  # shown 1505.61, kept whole
    assert ws.cell(row=2, column=column("营收增长(%) revenue growth")).number_format == "0.00"
    letter = revenue.column_letter
    assert ws.column_dimensions[letter].width >= len("1,505.61")
    notes = ws.cell(row=2, column=column("说明 notes"))
    assert notes.alignment.wrap_text
    run = {row[0]: row[1] for row in wb["Run"].iter_rows(values_only=True)}
    # no PE-TTM in the pool: every row says so, once, on the Run sheet
    assert "缺PE-TTM: PE规则未应用" in run["notes_every_row"]
    assert all("缺PE-TTM" not in str(ws.cell(row=r, column=column("说明 notes")).value or "") for r in (2, 3))
    assert header[0] == "代码" and ws.column_dimensions["B"].width >= 8  # 贵州茅台: four CJK characters
