"""The 主营业务分行业 / 分产品 table: each segment's margin and its change with its page, in the result's
分行业毛利率 column and its quotes in 出处, never taken for the company's gross margin (the 合并利润表's);
generated annual-report PDFs through ``xladdin screen`` and ``xladdin eval``."""

from __future__ import annotations

import json

import pytest
from test_documents import cli

from xladdin.testing import write_pdf

KEY_TABLE = ["2020年年度报告", "第二节 公司简介和主要财务指标", "七、近三年主要会计数据和财务指标", "(一) 主要会计数据",
             "单位：元 币种：人民币", "主要会计数据 2020年 2019年 本期比上年同期增减(%) 2018年",
             "营业收入 94,915,380,916.72 85,429,573,467.25 11.10 73,638,872,388.03",
             "归属于上市公司股东的净利润 46,697,285,429.81 41,206,471,014.43 13.33 35,203,625,263.22",
             "八、境内外会计准则下会计数据差异"]
# the SSE template: a table per section, the header wrapped, 增加 0.21 / 个百分点 wrapped onto the next line
SSE_SEGMENTS = ["第四节 经营情况讨论与分析", "2. 收入和成本分析", "(1). 主营业务分行业、分产品、分地区情况",
                "单位:元 币种:人民币", "主营业务分行业情况", "分行业 营业收入 营业成本 毛利率", "（%）", "营业收入",
                "比上年增", "减（%）", "营业成本", "比上年增", "减（%）", "毛利率比上年增减", "（%）",
                "酒类 94,821,999,102.45 8,083,371,418.24 91.48 11.10 9.76 增加 0.11 个百分点",
                "主营业务分产品情况", "分产品 营业收入 营业成本 毛利率", "（%）", "营业收入", "比上年增", "减（%）",
                "营业成本", "比上年增", "减（%）", "毛利率比上年增减", "（%）",
                "茅台酒 84,830,936,002.19 5,100,340,201.05 93.99 11.91 8.24 增加 0.21", "个百分点",
                "其他系列酒 9,991,063,100.26 2,983,031,217.19 70.14 4.70 12.45 减少 2.06 个百分点",
                "主营业务分地区情况", "分地区 营业收入 营业成本 毛利率", "（%）",
                "国内 92,389,735,145.96 7,874,927,603.81 91.48 12.09 10.51 增加 0.13 个百分点",
                "(2). 产销量情况分析表"]
STATEMENT = ["第十一节 财务报告", "合并利润表", "单位:元 币种:人民币", "项目 附注 2020年度 2019年度",
             "一、营业总收入 97,993,240,501.21 88,854,337,488.76",
             "其中：营业收入 七、61 94,915,380,916.72 85,429,573,467.25",
             "二、营业总成本 31,041,186,396.92 29,096,473,211.81",
             "其中：营业成本 七、61 8,154,001,476.28 7,430,013,945.12", "母公司利润表"]
# the SZSE template: 营业收入构成 (no 毛利率) first, then the ≥10% table; a relative change (-17.44% for
# -3.05 points), and a row whose printed margin is not its revenue and cost's
SZSE_SEGMENTS = ["2、收入与成本", "（1）营业收入构成", "单位：元", "2019 年 2018 年 同比增减",
                 "金额 占营业收入比重 金额 占营业收入比重", "分行业",
                 "医药 1,608,858,743.47 54.70% 1,441,629,698.79 53.03% 11.60%",
                 "（2）占公司营业收入或营业利润 10%以上的行业、产品或地区情况", "√ 适用 □ 不适用", "单位：元",
                 "营业收入 营业成本 毛利率 营业收入比上年", "同期增减", "营业成本比上年", "同期增减", "毛利率比上年同",
                 "期增减", "分行业", "医药 1,608,858,743.47 983,149,430.95 38.89% 11.60% 1.30% 6.23%",
                 "石化行业 35,048,822,691.22 29,984,218,329.21 14.45% 7.33% 11.30% -17.44%",
                 "化工 1,000,000.00 600,000.00 30.00% 5.00% 3.00% 1.00%", "分产品",
                 "原料药 1,020,477,644.34 652,198,278.33 36.09% -1.20% -6.10% 3.30%", "分地区",
                 "国内 1,512,860,024.18 745,641,007.79 50.71% 8.80% -8.00% 8.96%",
                 "公司主营业务数据统计口径在报告期发生调整的情况下，公司最近 1 年按报告期末口径调整后的主营业务数据"]
SZSE_KEYS = ["2019年年度报告", "六、主要会计数据和财务指标", "2019 年 2018 年 本年比上年增减 2017 年",
             "营业收入（元） 2,941,412,770.30 2,718,608,796.51 8.20% 2,308,922,170.29",
             "七、境内外会计准则下会计数据差异"]


@pytest.fixture(scope="module")
def screened(tiny_model_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("segments")
    (tmp / "reports").mkdir()
    write_pdf(tmp / "reports" / "600519_2020.pdf", [KEY_TABLE, SSE_SEGMENTS, STATEMENT])
    write_pdf(tmp / "reports" / "002099_2019.pdf", [SZSE_KEYS, SZSE_SEGMENTS])  # no financial statements
    (tmp / "pool.csv").write_text("代码,名称,行业\n600519,贵州茅台,白酒\n002099,海翔药业,医药\n", encoding="utf-8")
    r = cli(["screen", str(tmp / "pool.csv"), "--reports", str(tmp / "reports"), "-o", str(tmp / "out.json")],
            tiny_model_path, tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    sse, szse = json.loads((tmp / "out.json").read_text(encoding="utf-8"))["rows"]
    return sse, szse


def test_each_segment_s_margin_and_change_is_shown_with_its_page(screened):
    sse, _ = screened
    assert sse["分行业毛利率 segment gross margins"] == (
        "分行业: 酒类 91.48% (+0.11pct, 第2页) | "
        "分产品: 茅台酒 93.99% (+0.21pct, 第2页); 其他系列酒 70.14% (-2.06pct, 第2页)")  # no 分地区 row


def test_the_company_s_gross_margin_is_the_statement_s_never_a_segment_s(screened):
    sse, szse = screened
    assert sse["毛利率(%) gross margin"] == 91.41 and sse["上年毛利率(%) prior-year gross margin"] == 91.30
    # no 合并利润表 in the file: no gross margin, though segments give theirs
    assert szse["毛利率(%) gross margin"] is None
    assert "缺毛利率: 未找到合并利润表的营业收入与营业成本" in szse["说明 notes"]
    assert szse["分行业毛利率 segment gross margins"].startswith("分行业: 医药 38.89%")


def test_each_segment_row_is_quoted_as_printed_with_its_page_in_the_evidence(screened):
    sse, _ = screened
    evidence = sse["出处 evidence"]
    assert ("分行业毛利率「酒类 94,821,999,102.45 8,083,371,418.24 91.48 11.10 9.76 增加0.11个百分点」(第2页)"
            in evidence)
    assert ("分产品毛利率「茅台酒 84,830,936,002.19 5,100,340,201.05 93.99 11.91 8.24 增加0.21 个百分点」(第2页)"
            in evidence)
    assert "国内" not in evidence


def test_a_change_is_points_or_relative_as_the_revenue_and_cost_changes_say(screened):
    _, szse = screened
    shown = szse["分行业毛利率 segment gross margins"]
    assert "医药 38.89% (+6.23pct, 第2页)" in shown  # 11.60% and 1.30% give +6.21 points
    assert "石化行业 14.45% (较上年-17.44%, 相对变化非百分点, 第2页)" in shown  # -3.05 points: -17.44% of 17.50
    assert "分产品: 原料药 36.09% (+3.30pct, 第2页)" in shown
    assert "国内" not in shown and "54.70" not in shown  # 分地区, and the 营业收入构成 table (no 毛利率)


def test_a_row_whose_margin_is_not_its_revenue_and_cost_s_is_left_out_with_the_reason(screened):
    _, szse = screened
    assert "化工" not in szse["分行业毛利率 segment gross margins"]
    assert "分行业「化工」毛利率30.00%与营业收入、营业成本算得的40.00%不符, 各列无法确定" in szse["说明 notes"]


def test_eval_scores_the_gold_segment(tiny_model_path, tmp_path):
    (tmp_path / "reports").mkdir()
    write_pdf(tmp_path / "reports" / "a.pdf", [KEY_TABLE, SSE_SEGMENTS, STATEMENT])
    write_pdf(tmp_path / "reports" / "b.pdf", [SZSE_KEYS, SZSE_SEGMENTS])
    write_pdf(tmp_path / "reports" / "c.pdf", [KEY_TABLE])
    gold = [{"file": "a.pdf", "code": "600519", "name": "a",
             "segment": {"name": "酒类", "gross_margin_printed": "91.48", "change_printed": "增加 0.11 个百分点",
                         "page": 2}},
            {"file": "b.pdf", "code": "002099", "name": "b",  # the wrong page: wrong
             "segment": {"name": "医药", "gross_margin_printed": "38.89%", "change_printed": "6.23%", "page": 3}},
            {"file": "c.pdf", "code": "600000", "name": "c", "segment": None}]  # none read, none expected
    (tmp_path / "gold.jsonl").write_text("\n".join(json.dumps(g, ensure_ascii=False) for g in gold),
                                         encoding="utf-8")
    r = cli(["eval", str(tmp_path / "gold.jsonl"), "--reports", str(tmp_path / "reports"), "-o",
             str(tmp_path / "e.json")], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "e.json").read_text(encoding="utf-8"))
    assert report["fields"]["segment"] == {"right": 1, "wrong": 1, "missing": 0}
    assert "segment wrong" in r.stdout and "page 2" in r.stdout


def test_a_bad_gold_segment_names_its_line(tiny_model_path, tmp_path):
    (tmp_path / "gold.jsonl").write_text('{"file": "a.pdf", "code": "600001", "name": "x", "segment": "酒类"}\n',
                                         encoding="utf-8")
    r = cli(["eval", str(tmp_path / "gold.jsonl")], tiny_model_path, tmp_path)
    assert r.returncode != 0
    assert "gold.jsonl line 1: 'segment' is '酒类', expected null or an object" in r.stderr


# The older template (its margin headed 营业利润率, 国投电力 2011's), the page broken between the table's unit line
# and its header, the header wrapped (the section on its first line, the margin on a later one: 华能水电 2024's),
# and a change printed on the lines after its row's numbers, 个百分点 broken again
OLD_UNIT_PAGE = ["第四节 董事会报告", "（2）公司主营业务及其经营状况", "1）主营业务分行业、产品情况",
                 "单位:万元 币种:人民币"]
OLD_SEGMENTS = ["2011年年度报告", "主营业务分行业情况", "分行业 营业收入 营业成本 营业利润", "率(%)", "营业收入",
                "比上年增", "减(%)", "营业成本", "比上年增", "减(%)", "营业利润", "率比上年", "增减（%）",
                "电力 1,800,918 1,442,427 19.91 14.00 18.22 减少 2.86", "个百分点",
                "新能源 200,000 80,000 60.00 0.00 13.64", "减少", "4.80", "个百", "分点",
                # 25.00 is no (100,000 - 90,000) / 100,000: an operating margin, not read
                "贸易 100,000 90,000 25.00 10.00 5.00 增加 1.00", "个百分点",
                "主营业务分地区情况", "分地区 营业收入 营业成本 营业利润率(%)",
                "国内 2,100,918 1,613,658 23.19 14.00 18.22 减少 2.86", "个百分点", "（3）主要供应商、客户情况"]


def test_older_and_broken_segment_tables_are_read_and_checked_like_the_others(tiny_model_path, tmp_path):
    (tmp_path / "reports").mkdir()
    write_pdf(tmp_path / "reports" / "600886_2011.pdf", [KEY_TABLE + OLD_UNIT_PAGE, OLD_SEGMENTS])
    (tmp_path / "pool.csv").write_text("代码,名称,行业\n600886,国投电力,电力\n", encoding="utf-8")
    r = cli(["screen", str(tmp_path / "pool.csv"), "--reports", str(tmp_path / "reports"), "-o",
             str(tmp_path / "out.json")], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"][0]
    assert (row["分行业毛利率 segment gross margins"]
            == "分行业: 电力 19.91% (-2.86pct, 第2页); 新能源 60.00% (-4.80pct, 第2页)")
    assert "分行业毛利率「新能源 200,000 80,000 60.00 0.00 13.64 减少4.80」(第2页)" in row["出处 evidence"]
    assert "分行业「贸易」毛利率25.00与营业收入、营业成本算得的10.00%不符, 各列无法确定" in row["说明 notes"]
