import csv
import json
from pathlib import Path

import openpyxl
import pytest

from xladdin.errors import InputError, XladdinError
from xladdin.jobs.report import neutralize, write_report
from xladdin.reading.pool import SAMPLE_POOL, match_header, pool_from_table, read_pool
from xladdin.tasks import Provenance, ScreenResult, ScreenTask
from xladdin.testing import screen_answer

SAMPLE = SAMPLE_POOL


@pytest.mark.parametrize(
    "header, field, scale",
    [
        ("代码", "code", 1.0), ("股票代码", "code", 1.0), ("ts_code", "code", 1.0), ("名称", "name", 1.0),
        ("行业", "industry", 1.0), ("市盈率TTM", "pe_ttm", 1.0), ("市盈率(TTM)", "pe_ttm", 1.0),
        ("PE-TTM", "pe_ttm", 1.0), ("ROE", "roe", 1.0), ("ROE(%)", "roe", 1.0), ("净资产收益率", "roe", 1.0),
        ("每股收益", "eps", 1.0), ("EPS", "eps", 1.0), ("财报摘要", "report_text", 1.0),
        ("Report Summary", "report_text", 1.0), ("净利润(万元)", "net_profit", 1e-4),
        ("净利润（亿元）", "net_profit", 1.0),
        ("营业收入(元)", "revenue", 1e-8), ("ＲＯＥ", "roe", 1.0),
    ],
)
def test_headers_recognised(header, field, scale):
    assert match_header(header) == (field, scale)


def test_unknown_header_is_ignored_and_missing_code_is_clear():
    assert match_header("备注") is None
    with pytest.raises(InputError, match="^columns have no code column"):
        pool_from_table(["名称", "ROE"], [["a", 1]], Path("p.csv"))


def test_sample_pool_reads_and_covers_the_cases():
    pool = read_pool(SAMPLE)
    recs = pool.records()
    assert 18 <= len(recs) <= 30
    task = ScreenTask()
    parsed = [task.parse(r) for r in recs]
    assert any(p.is_st for p in parsed)
    assert any(p.pe_ttm is not None and p.pe_ttm <= 0 for p in parsed)
    assert any(p.pe_ttm and p.pe_ttm > 50 and (p.roe or 0) > 0 for p in parsed)
    assert all(p.report_text for p in parsed)


def test_xlsx_pool_with_english_headers_and_money_in_wan(tmp_path):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["code", "name", "pe_ttm", "roe", "净利润(万元)", "note"])
    ws.append([1, "平安银行", 4.1, 11.38, 4645500, "x"])
    ws.append([None, None, None, None, None, None])
    wb.save(tmp_path / "p.xlsx")
    pool = read_pool(tmp_path / "p.xlsx")
    (rec,) = pool.records()
    assert rec["net_profit"] == pytest.approx(464.55)
    assert ScreenTask().parse(rec).code == "000001.SZ"


def test_gbk_csv(tmp_path):
    p = tmp_path / "gbk.csv"
    p.write_bytes("代码,名称\n600519,贵州茅台\n".encode("gbk"))
    assert read_pool(p).records() == [{"code": "600519", "name": "贵州茅台"}]


def test_neutralize():
    assert neutralize('=HYPERLINK("x")') == '\'=HYPERLINK("x")'
    for s in ("+1", "-1+2", "@SUM(A1)", "\tx"):
        assert neutralize(s).startswith("'")
    assert neutralize("正常") == "正常" and neutralize(-3) == -3


def _results(pool):
    task = ScreenTask()
    out = []
    for i, rec in enumerate(pool.records()):
        if i == 1:
            out.append(XladdinError("engine offline (http://127.0.0.1:9/v1)"))
            continue
        inp = task.parse(rec)
        answer = screen_answer("=cmd|' /C calc'!A0")
        out.append(
            task.finish(inp, task.validate_output(answer), Provenance(model="m", task_version="v", cached=False))
        )
    return out


@pytest.mark.parametrize("suffix", [".xlsx", ".csv", ".json"])
def test_reports_keep_order_neutralise_and_mark_errors(tmp_path, suffix):
    src = tmp_path / "pool.csv"
    src.write_text("代码,名称,ROE,市盈率TTM,行业,财报摘要\n600519,贵州茅台,34,25,白酒,=1+1\n000858,五粮液,25,18,白酒,x\n"
                   "002024,ST易购,-111,-2.6,零售,亏损\n", encoding="utf-8")
    pool = read_pool(src)
    results = _results(pool)
    out = write_report(tmp_path / f"r{suffix}", pool, results, ScreenResult, {"note": "starter", "model": "m"})
    if suffix == ".xlsx":
        wb = openpyxl.load_workbook(out)
        ws = wb["Results"]
        rows = list(ws.iter_rows(values_only=True))
        assert ws.freeze_panes == "C2"
        risk = rows[0].index("风险等级 risk")
        assert ws.cell(row=2, column=risk + 1).fill.start_color.rgb.endswith("C6EFCE")  # 低 green
        assert ws.cell(row=4, column=risk + 1).fill.start_color.rgb.endswith("FFC7CE")  # 高 red
        assert all(c.data_type != "f" for r in ws.iter_rows() for c in r)  # no formula anywhere
        assert wb["Summary"]["A1"].value == "starter" and wb["Summary"]._charts
        assert ws["A1"].comment.text == "starter" and ws.sheet_properties.tabColor.rgb.endswith("C00000")
        counts = {r[0]: r[1] for r in wb["Summary"].iter_rows(min_row=4, max_row=7, values_only=True)}
        assert counts == {"高": 1, "中": 0, "低": 1, "错误": 1}
    elif suffix == ".csv":
        rows = list(csv.reader(out.open(encoding="utf-8-sig")))
        assert json.loads(out.with_suffix(".run.json").read_text(encoding="utf-8"))["note"] == "starter"
    else:
        data = json.loads(out.read_text(encoding="utf-8"))
        rows = [list(data["rows"][0])] + [list(r.values()) for r in data["rows"]]
    header, body = rows[0], rows[1:]
    assert [r[1] for r in body] == ["贵州茅台", "五粮液", "ST易购"]
    err = header.index("错误 error")
    assert body[1][err] == "#QWEN! engine offline (http://127.0.0.1:9/v1)"
    # a formula-looking text is made plain text where it could run (CSV), kept as is elsewhere
    quote = "'" if suffix == ".csv" else ""
    assert body[0][header.index("财报摘要")] == quote + "=1+1"
    assert body[0][header.index("理由 reason")].startswith(quote + "=cmd")
    # numbers read from the CSV's text are written back as numbers, negatives without an apostrophe
    roe, pe = header.index("ROE"), header.index("市盈率TTM")
    expected = ["34", "-111", "-2.6"] if suffix == ".csv" else [34, -111, -2.6]
    assert [body[0][roe], body[2][roe], body[2][pe]] == expected
