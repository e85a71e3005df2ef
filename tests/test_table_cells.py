"""Key-figure tables read by their cells (``reading/layout.py``, pdfplumber's table finder): ruled
tables whose text layer defeats a reading line by line, each a generated annual-report PDF scored by
``xladdin eval`` through the CLI. Every figure right, or missing where its cell cannot be trusted;
never wrong."""

from __future__ import annotations

import json

import pytest
from ruled import write_ruled_pdf
from test_documents import SHARED, cli
from test_layouts import score, verdicts

from xladdin.jobs.evaluate import KEY_FIGURES

pytest.importorskip("pdfplumber")

W7 = [120, 72, 72, 72, 52, 72, 72]
SSE_HEAD = [["主要会计数据", "2015年", "2014年", None, "本期比上\n年同期增\n减(%)", "2013年", None],
            ["^", "^", "调整后", "调整前", "^", "调整后", "调整前"]]
REVENUE = ["营业收入", "31,279,699.91", "32,957,169.11", "32,957,169.11", "-5.09", "28,338,981.05", "28,338,981.05"]
PROFIT = ["归属于上市公司股东的净\n利润", "5,427,522.84", "5,599,833.73", "5,596,633.73", "-3.08", "3,305,278.24",
          "3,305,278.24"]
DEDUCTED = ["归属于上市公司股东的扣\n除非经常性损益的净利润", "5,603,740.41", "5,431,682.52", "5,428,482.52", "3.17",
            "3,278,140.28", "3,278,140.28"]
CASH = ["经营活动产生的现金流量\n净额", "22,896,771.00", "21,440,981.50", "21,418,981.50", "6.79", "15,197,612.08",
        "15,197,612.08"]
INDICATORS = [["主要财务指标", "2015年", "2014年", None, "本期比上\n年同期增\n减(%)", "2013年", None],
              ["^", "^", "调整后", "调整前", "^", "调整后", "调整前"],
              ["基本每股收益（元／股）", "0.7998", "0.8252", "0.8247", "-3.08", "0.5265", "0.5265"],
              ["加权平均净资产收益率（%）", "21.84", "26.90", "26.91", "减少5.06个\n百分点", "21.27", "21.30"]]
SSE_GOLD = {"revenue": 31279699.91, "net_profit": 5427522.84, "net_profit_prev": 5599833.73,
            "net_profit_ex": 5603740.41, "ocf": 22896771.00, "net_profit_change_pct": -3.08, "eps": 0.7998,
            "roe": 21.84}
TITLE = ["2015年年度报告", "第二节 公司简介和主要财务指标", "七、近三年主要会计数据和财务指标", "(一) 主要会计数据",
         "单位：元 币种：人民币"]

# 调整前 before 调整后, the header over four rows, each label's lines in rows of their own above and
# below the row of its figures, the unit in the labels
W7B = [130, 70, 70, 70, 56, 70, 70]
ROWS_HEAD = [["", "", "", "", "本年比上年", "", ""],
             ["", "", "2018年", "", "", "2017年", ""],
             ["", "2019年", "", "", "增减", "", ""],
             ["", "", "调整前", "调整后", "调整后", "调整前", "调整后"]]
ROWS_BODY = [["营业收入（元）", "39,608,340.04", "36,683,290.29", "37,036,329.10", "6.94%", "33,713,780.65",
              "33,713,780.65"],
             ["归属于上市公司股东的净", "", "", "", "", "", ""],
             ["", "992,955.15", "1,055,368.36", "1,144,409.72", "-13.23%", "1,845,279.89", "1,845,279.89"],
             ["利润（元）", "", "", "", "", "", ""],
             ["经营活动产生的现金流量", "", "", "", "", "", ""],
             ["", "2,723,475.01", "2,373,152.58", "2,521,400.31", "8.01%", "2,965,001.10", "2,965,001.10"],
             ["净额（元）", "", "", "", "", "", ""],
             ["基本每股收益（元/股）", "0.62", "0.66", "0.72", "-13.89%", "1.15", "1.15"],
             ["加权平均净资产收益率", "7.22%", "8.32%", "8.99%", "-1.77%", "15.87%", "15.87%"]]
ROWS_GOLD = {"revenue": 39608340.04, "net_profit": 992955.15, "net_profit_prev": 1144409.72, "ocf": 2723475.01,
             "net_profit_change_pct": -13.23, "eps": 0.62, "roe": 7.22}

LAYOUTS: dict[str, tuple[list[list], dict]] = {
    # the SSE restated form (调整后/调整前 under the prior years only: five numbers for three year columns),
    # labels wrapped inside their cells, the table going on over a page break under a running header
    "sse_restated_two_pages": ([TITLE + [(W7, [*SSE_HEAD, REVENUE, PROFIT])],
                                ["2015年年度报告", (W7, [DEDUCTED, CASH]), "(二) 主要财务指标", (W7, INDICATORS),
                                 "八、境内外会计准则下会计数据差异"]], SSE_GOLD),
    # the same drawn inside form XObjects placed 30 points right and 40 down (their lines and characters
    # read through the forms' matrices), and on landscape pages (/Rotate 90: read by pdfplumber's own parse)
    "sse_restated_in_forms": ([[{"form": (30, -40)}, *TITLE, (W7, [*SSE_HEAD, REVENUE, PROFIT])],
                               [{"form": (30, -40)}, "2015年年度报告", (W7, [DEDUCTED, CASH]), "(二) 主要财务指标",
                                (W7, INDICATORS), "八、境内外会计准则下会计数据差异"]], SSE_GOLD),
    "sse_restated_turned_pages": ([[{"turned": True}, *TITLE, (W7, [*SSE_HEAD, REVENUE, PROFIT])],
                                   [{"turned": True}, "2015年年度报告", (W7, [DEDUCTED, CASH]), "(二) 主要财务指标",
                                    (W7, INDICATORS), "八、境内外会计准则下会计数据差异"]], SSE_GOLD),
    "label_rows_header_rows": ([["2019年年度报告全文", "第二节 公司简介和主要财务指标", "六、主要会计数据和财务指标",
                                 "公司是否需追溯调整或重述以前年度会计数据：√ 是 □ 否", (W7B, [*ROWS_HEAD, *ROWS_BODY]),
                                 "七、境内外会计准则下会计数据差异"]], ROWS_GOLD),
    # this year's revenue too wide for its column: its last digit stands in the next cell, so the row's
    # cells are no figures to trust; the text line holds it whole (SSE's restated form: 5 numbers)
    "figure_runs_into_the_next_cell": ([TITLE + [([120, 54, *W7[2:]], [*SSE_HEAD, [REVENUE[0], "<31,279,699,772.91",
                                                                              *REVENUE[2:]], PROFIT])]],
                                       {"revenue": 31279699772.91, "net_profit": 5427522.84,
                                        "net_profit_prev": 5599833.73, "net_profit_change_pct": -3.08}),
}


@pytest.fixture(scope="module")
def scored(tiny_model_path, tmp_path_factory):
    rows, report, _ = score(LAYOUTS, write_ruled_pdf, tiny_model_path, tmp_path_factory.mktemp("ruled"), 600200)
    return rows, report


@pytest.mark.parametrize("layout", ["sse_restated_two_pages", "sse_restated_in_forms", "sse_restated_turned_pages",
                                    "label_rows_header_rows"])
def test_every_figure_of_a_ruled_table_is_right(scored, layout):
    rows, _ = scored
    assert verdicts(rows[layout]) == dict.fromkeys(LAYOUTS[layout][1], "right"), rows[layout]


def test_the_prior_year_is_the_restated_column_and_the_row_says_so(scored):
    rows, _ = scored
    assert "上年数有调整前/调整后两列, 上年取调整后(重述)数" in rows["label_rows_header_rows"]["notes"]


def test_a_figure_that_ran_into_the_next_cell_is_read_whole_from_its_line_never_cut(scored):
    rows, report = scored
    row = rows["figure_runs_into_the_next_cell"]
    assert verdicts(row) == dict.fromkeys(["revenue", "net_profit", "net_profit_prev", "net_profit_change_pct"],
                                          "right"), row
    assert row["revenue"]["read"] == pytest.approx(312.7969977291)  # 亿元: whole, not its cut cells'
    assert all(f["wrong"] == 0 for f in report["fields"].values())


GOLD = SHARED / "annual_reports" / "gold.jsonl"
KEY_FIGURES_RIGHT = 183  # of 183 key figures in the 23 reports there (170 before the pre-2007 template and the
# 摘要's bare unit line were read; 124 read line by line alone)
ALL_RIGHT = 231  # of 231 figures with the gross margins and the segments (216 before; 156 before the cells and
# statements)


@pytest.mark.slow
@pytest.mark.skipif(not GOLD.is_file(), reason="../shared/data annual reports not present")
def test_the_real_reports_key_figures_none_wrong_and_no_fewer_right(tiny_model_path, tmp_path):
    r = cli(["eval", str(GOLD), "-o", str(tmp_path / "eval.json"), "--no-cache"], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "eval.json").read_text(encoding="utf-8"))
    assert all(f["wrong"] == 0 for f in report["fields"].values()), r.stdout
    right = sum(report["fields"][name]["right"] for name in KEY_FIGURES)
    assert right >= KEY_FIGURES_RIGHT, r.stdout
    assert sum(f["right"] for f in report["fields"].values()) >= ALL_RIGHT, r.stdout
    labels = {"revenue": "营收", "net_profit": "净利润", "net_profit_prev": "上年净利润", "net_profit_ex": "扣非净利润",
              "ocf": "经营现金流", "net_profit_change_pct": "净利增长", "eps": "EPS", "roe": "ROE",
              "gross_margin": "毛利率", "gross_margin_prev": "上年毛利率", "segment": "分行业毛利率"}
    for row in report["rows"]:  # a figure not read says why, in the row's notes
        missing = [name for name, v in row.items() if isinstance(v, dict) and v["verdict"] == "missing"]
        assert all(f"缺{labels[name]}" in row["notes"] for name in missing), (row["file"], missing, row["notes"])
