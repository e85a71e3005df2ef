"""Trust, fourth round (issue 64), each case as a user or an attacker meets it, through the CLI: no formula in
any workbook the product writes, no answer stored under another model than its own, a cache entry that does
not validate is a miss, a damaged night never stops the nights after it."""

from __future__ import annotations

import openpyxl
from kit import run_main
from test_user_trust import refusing_server

FORMULAS = ("=1+1", '=HYPERLINK("http://evil.example/x","点此")', "=cmd|' /C calc'!A0")


def formula_cells(path) -> list[str]:
    """Every cell of every sheet of the workbook at ``path`` that holds a formula, as sheet!cell."""
    wb = openpyxl.load_workbook(path)
    return [f"{ws.title}!{c.coordinate}" for ws in wb.worksheets for row in ws.iter_rows() for c in row
            if c.data_type == "f"]


def texts(path) -> set[str]:
    wb = openpyxl.load_workbook(path)
    return {c.value for ws in wb.worksheets for row in ws.iter_rows() for c in row if isinstance(c.value, str)}


REPORT = ("主要会计数据 单位：万元 2023年 2022年 本期比上年同期增减(%) 2021年\n"
          "营业收入 52,310.50 48,002.10 8.98 40,100.00\n归属于上市公司股东的净利润 3,120.40 1,050.20 197.12 2,300.00")


def test_no_text_of_a_pool_or_a_report_becomes_a_formula_in_any_workbook_written(tmp_path, monkeypatch, capsys):
    rows = [("600001", FORMULAS[1], FORMULAS[0], "20", "12", REPORT),
            ("600002", "光伏乙", FORMULAS[0], "30", "8", REPORT),
            ("600003", "光伏丙", FORMULAS[2], "15", "16", REPORT)]
    pool = tmp_path / "pool.csv"
    import csv

    with pool.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["代码", "名称", "行业", "市盈率TTM", "ROE(%)", "财报摘要"])
        w.writerows(rows)
    server = refusing_server()
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        r = run_main(capsys, "screen", pool, "-o", tmp_path / "r.xlsx", "--no-progress")
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    assert formula_cells(tmp_path / "r.xlsx") == []
    assert set(FORMULAS) <= texts(tmp_path / "r.xlsx")  # kept, as text: the Results and Summary sheets
    r = run_main(capsys, "compare", tmp_path / "r.xlsx", "--pool", pool, "-o", tmp_path / "c.xlsx")
    assert r.returncode == 0, r.stderr
    assert formula_cells(tmp_path / "c.xlsx") == []
    assert FORMULAS[0] in texts(tmp_path / "c.xlsx")
