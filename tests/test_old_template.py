"""Key-figure tables of other templates than today's, each a generated annual report (ruled tables, as
reports print them) scored by ``xladdin eval`` through the CLI: the pre-2007 template (a one-year table in
元, a three-year table in 万元 with restated prior years, its header at a page's foot, 每股收益 and ROE
全面摊薄 with ROE 加权平均 in the 利润表附表, the statements not titled 合并), a 年度报告摘要 whose unit is
a bare 元 line, and tables whose unit is stated nowhere but beside another table: a figure is read in its
own table's unit, or missing with the reason; never in a neighbour's."""

from __future__ import annotations

import pytest
from ruled import write_ruled_pdf
from test_layouts import score, verdicts

pytest.importorskip("pdfplumber")

HEAD_2003 = "示例实业股份有限公司 2003 年年度报告"
W2 = [210, 110]
W6 = [170, 68, 68, 68, 68, 68]
W5 = [170, 80, 80, 80, 80]
ONE_YEAR = (W2, [["项 目", "金 额"], ["利润总额", "33,780,771.60"], ["净利润", "29,852,565.09"],
                 ["扣除非经常性损益后的净利润", "29,996,659.68"], ["主营业务利润", "85,073,123.03"],
                 ["补贴收入", "-"], ["经营活动产生的现金流量净额", "(105,584,555.56)"],
                 ["现金及现金等价物净增减额", "(9,281,829.83)"]])
# the three-year table in 万元: its title, unit and years at the foot of one page, 调整后/调整前 and its rows on
# the next; 每股收益 and 净资产收益率 全面摊薄 only (加权平均 in the 附表 below)
THREE_YEAR_HEAD = (W6, [["财务指标", "2003 年度", "2002 年度", None, "2001 年度", None]])
THREE_YEAR_ROWS = (W6, [["", "", "调整后", "调整前", "调整后", "调整前"],
                        ["主营业务收入", "29,564.14", "47,579.28", "47,579.28", "46,563.73", "46,563.73"],
                        ["净利润", "2,985.26", "3,591.05", "3,591.05", "3,706.00", "3,176.00"],
                        ["总资产", "85,996.25", "69,451.36", "69,451.36", "69,882.14", "69,352.14"],
                        ["每股收益（全面摊薄）", "0.3330", "0.40", "0.40", "0.41", "0.35"],
                        ["净资产收益率（全面摊薄）", "11.47%", "15.40%", "15.58%", "18.79%", "16.55%"],
                        ["经营活动产生的现金流量净额", "(10,558.46)", "1,276.30", "1,276.30", "2,118.00",
                         "2,118.00"]])
ANNEX = (W5, [["报告期利润", "净资产收益率（%）", None, "每股收益（元）", None],
              ["", "全面摊薄", "加权平均", "全面摊薄", "加权平均"],
              ["主营业务利润", "32.68%", "34.64%", "0.9490", "0.9490"],
              ["净利润", "11.47%", "12.15%", "0.3330", "0.3330"],
              ["扣除非经常性损益后的净利润", "11.52%", "12.12%", "0.3346", "0.3346"]])
# the company's own statements (not titled 合并): 主营业务收入 and 主营业务成本, one column a year
OLD_STATEMENTS = ["第十一节 财务报告", "利润及利润分配表", "单位：人民币元",
                  ([130, 40, 90, 90], [["项目", "注释", "2003 年度", "2002 年度"],
                                       ["一、主营业务收入", "24", "295,641,364.71", "475,792,792.26"],
                                       ["减：主营业务成本", "24", "195,368,064.47", "372,117,513.52"],
                                       ["二、主营业务利润", "", "85,073,123.03", "79,679,775.36"],
                                       ["五、净利润", "", "29,852,565.09", "35,910,540.68"]]),
                  "现金流量表", "单位：人民币元",
                  ([170, 90, 90], [["项目", "2003 年度", "2002 年度"],
                                   ["经营活动产生的现金流量净额", "(105,584,555.56)", "12,763,031.98"]])]
PRE_2007 = [[HEAD_2003, "第三节 会计数据和业务数据摘要", "一、本年度主要利润指标", "单位：人民币元", ONE_YEAR,
             "注：扣除非经常性损益项目和涉及金额：", "处理固定资产净收益 241,311.00",
             "二、截至报告期末公司前三年的主要会计数据和财务指标", "单位：人民币万元", THREE_YEAR_HEAD],
            [HEAD_2003, THREE_YEAR_ROWS, "利润表附表", ANNEX, "三、报告期内股东权益变动情况"],
            [HEAD_2003, *OLD_STATEMENTS]]
PRE_2007_GOLD = {
    "revenue": 295641400.0,  # 29,564.14 万元: the three-year table's (the one-year table has none)
    "net_profit": 29852565.09,  # the one-year table's, in 元 (the three-year table's 2,985.26 万元 agrees)
    "net_profit_prev": 35910500.0,  # 3,591.05 万元, 2002 调整后
    "net_profit_ex": 29996659.68, "ocf": -105584555.56, "net_profit_change_pct": None,  # no change column
    "eps": 0.333, "roe": 12.15,  # 全面摊薄 EPS; ROE 加权平均 from the 附表 (the table's own is 全面摊薄 11.47%)
    "gross_margin": 33.92, "gross_margin_prev": 21.79}

# a 年度报告摘要: its unit a bare 元 line above the table (no 单位：), balance rows first, the table going on over
# the page break, a quarterly table after it
SUMMARY_ROWS = [["", "2024 年末", "2023 年末", "本年末比上年末增减", "2022 年末"],
                ["总资产", "15,785,983,734.55", "17,939,311,256.63", "-12.00%", "21,055,969,393.06"],
                ["", "2024 年", "2023 年", "本年比上年增减", "2022 年"],
                ["营业收入", "12,196,223,734.01", "13,408,319,799.56", "-9.04%", "20,282,469,258.28"],
                ["归属于上市公司股东的净利润", "-357,277,652.58", "307,461,061.38", "-216.20%", "1,434,191,144.16"],
                ["归属于上市公司股东的扣除非\n经常性损益的净利润", "-380,108,163.92", "294,754,728.09", "-228.96%",
                 "1,628,766,469.60"],
                ["经营活动产生的现金流量净额", "1,207,395,648.34", "1,921,354,006.32", "-37.16%", "1,639,364,992.07"],
                ["基本每股收益（元/股）", "-0.5790", "0.4918", "-217.73%", "2.3022"],
                ["加权平均净资产收益率", "-5.00%", "4.10%", "-9.10%", "21.73%"]]
QUARTERS = [["", "第一季度", "第二季度", "第三季度", "第四季度"],
            ["营业收入", "2,973,005,617.76", "3,245,152,908.83", "3,039,952,340.98", "2,938,112,866.44"],
            ["归属于上市公司股东的净利润", "23,170,466.54", "48,576,345.98", "59,110,076.46", "-488,134,541.56"]]
W5S = [170, 90, 90, 80, 90]
SUMMARY_HEAD = "示例诊断股份有限公司 2024 年年度报告摘要"
SUMMARY = [[SUMMARY_HEAD, "3、主要会计数据和财务指标", "（1） 近三年主要会计数据和财务指标",
            "公司是否需追溯调整或重述以前年度会计数据", "□是 否", ">元", (W5S, SUMMARY_ROWS[:-2])],
           [SUMMARY_HEAD, (W5S, SUMMARY_ROWS[-2:]), "（2） 分季度主要会计数据", "单位：元", (W5S, QUARTERS)]]
SUMMARY_GOLD = {"revenue": 12196223734.01, "net_profit": -357277652.58, "net_profit_prev": 307461061.38,
                "net_profit_ex": -380108163.92, "ocf": 1207395648.34, "net_profit_change_pct": -216.20,
                "eps": -0.5790, "roe": -5.00}

# the three-year table in 万元 first, then a one-year table whose unit is stated nowhere: its figures are
# not the 万元 table's (23,456,789.01 万元 would be 10,000 times the company's cash flow)
NEIGHBOUR = [["示例股份有限公司 2004 年年度报告", "第三节 会计数据和业务数据摘要",
              "一、截至报告期末公司前三年主要会计数据和财务指标", "单位：人民币万元",
              (W5, [["项目", "2004 年", "2003 年", "本年比上年增减(%)", "2002 年"],
                    ["主营业务收入", "12,345.67", "10,000.00", "23.46", "9,000.00"],
                    ["净利润", "1,234.56", "1,000.00", "23.46", "900.00"],
                    ["每股收益", "0.25", "0.20", "25.00", "0.18"],
                    ["净资产收益率（加权平均）", "10.50%", "9.00%", "1.50", "8.00%"]]),
              "二、本年度主要利润指标",
              (W2, [["项 目", "金 额"], ["利润总额", "14,000,000.00"], ["净利润", "12,345,600.00"],
                    ["扣除非经常性损益后的净利润", "12,000,000.00"],
                    ["经营活动产生的现金流量净额", "23,456,789.01"]]),
              "三、报告期内股东权益变动情况"]]
NEIGHBOUR_GOLD = {"revenue": 123456700.0, "net_profit": 12345600.0, "net_profit_prev": 10000000.0,
                  "net_profit_change_pct": 23.46, "eps": 0.25, "roe": 10.50, "net_profit_ex": 12000000.0,
                  "ocf": 23456789.01}
# today's template, the key table's unit stated nowhere, a 万元 table below it on the same page (its unit line
# in the page's text after the key table's rows): the key table's figures are missing, never in 万元
BELOW = [["2023年年度报告", "第二节 公司简介和主要财务指标", "六、主要会计数据和财务指标",
          (W5, [["", "2023年", "2022年", "本年比上年增减", "2021年"],
                ["营业收入", "1,000,000,000.00", "800,000,000.00", "25.00%", "700,000,000.00"],
                ["归属于上市公司股东的净利润", "120,000,000.00", "100,000,000.00", "20.00%", "90,000,000.00"],
                ["基本每股收益（元/股）", "0.60", "0.50", "20.00%", "0.45"]]),
          "七、境内外会计准则下会计数据差异", "八、主要子公司的经营情况", "单位：万元",
          ([170, 90, 90], [["子公司", "营业收入", "净利润"], ["示例子公司", "12,000.00", "1,500.00"]]),
          "九、其他"]]
BELOW_GOLD = {"revenue": 1000000000.0, "net_profit": 120000000.0, "eps": 0.60}
# a table whose unit line says 千元 over figures printed in 元 (the 合并利润表 gives them in 元): the two are
# 1,000 times apart, so the figure is 数据存疑 and not shown
SLIP = [["2023年年度报告", "第二节 公司简介和主要财务指标", "六、主要会计数据和财务指标", "单位：千元",
         (W5, [["", "2023年", "2022年", "本年比上年增减", "2021年"],
               ["营业收入", "1,000,000,000.00", "800,000,000.00", "25.00%", "700,000,000.00"]]),
         "七、境内外会计准则下会计数据差异"],
        ["第十节 财务报告", "合并利润表", "单位：元", "项目 附注 2023 年度 2022 年度",
         "一、营业收入 1,000,000,000.00 800,000,000.00", "减：营业成本 600,000,000.00 520,000,000.00",
         "母公司利润表", "单位：元", "一、营业收入 400,000.00 300,000.00"]]
SLIP_GOLD = {"revenue": 1000000000.0, "gross_margin": 40.0, "gross_margin_prev": 35.0}

LAYOUTS: dict[str, tuple[list[list], dict]] = {
    "pre_2007_split_tables": (PRE_2007, PRE_2007_GOLD),
    "summary_bare_unit_line": (SUMMARY, SUMMARY_GOLD),
    "one_year_table_without_unit": (NEIGHBOUR, NEIGHBOUR_GOLD),
    "unit_only_below_the_table": (BELOW, BELOW_GOLD),
    "unit_slip_against_the_statement": (SLIP, SLIP_GOLD),
}


@pytest.fixture(scope="module")
def scored(tiny_model_path, tmp_path_factory):
    return score(LAYOUTS, write_ruled_pdf, tiny_model_path, tmp_path_factory.mktemp("old"), 600300)


def test_the_pre_2007_template_reads_both_tables_each_in_its_own_unit(scored):
    rows, _, _ = scored
    row = rows["pre_2007_split_tables"]
    assert verdicts(row) == dict.fromkeys([k for k, v in PRE_2007_GOLD.items() if v is not None], "right"), row
    assert row["net_profit_change_pct"]["read"] is None  # no change column: none invented
    assert "上年数有调整前/调整后两列, 上年取调整后(重述)数" in row["notes"]


def test_a_bare_unit_line_above_a_summary_s_table_is_its_unit(scored):
    rows, _, _ = scored
    row = rows["summary_bare_unit_line"]
    assert verdicts(row) == dict.fromkeys(SUMMARY_GOLD, "right"), row


def test_a_table_without_its_own_unit_is_never_read_in_a_neighbour_s(scored):
    rows, report, stdout = scored
    row = rows["one_year_table_without_unit"]
    assert all(f["wrong"] == 0 for f in report["fields"].values()), stdout
    right = ["revenue", "net_profit", "net_profit_prev", "net_profit_change_pct", "eps", "roe"]
    assert {k: verdicts(row)[k] for k in right} == dict.fromkeys(right, "right"), row
    # the one-year table states no unit: its own figures are missing, and say why
    assert verdicts(row)["ocf"] == "missing" and "缺经营现金流: 表格未写单位" in row["notes"], row
    assert verdicts(row)["net_profit_ex"] == "missing" and "缺扣非净利润: 表格未写单位" in row["notes"], row
    below = rows["unit_only_below_the_table"]
    assert verdicts(below) == {"revenue": "missing", "net_profit": "missing", "eps": "right"}, below
    assert "缺营收: 表格未写单位" in below["notes"]


def test_a_unit_slip_against_the_statement_is_doubtful_never_shown(scored):
    rows, _, _ = scored
    row = rows["unit_slip_against_the_statement"]
    assert verdicts(row) == {"revenue": "missing", "gross_margin": "right", "gross_margin_prev": "right"}, row
    assert "相差1000倍, 单位不一致, 未取" in row["notes"], row


# ------------------------------------------------------------------ the same traits in a text, read directly
def _text(*pages: list[str]) -> str:
    return "\f".join("\n".join(p) for p in pages)


def test_two_tables_that_disagree_on_this_year_s_figure_withhold_it():
    """The one-year table's 净利润 in 元 and the three-year table's in 千元 (its unit line wrong, or the row
    another's): 10 times apart, neither is shown."""
    from xladdin.reading.tables import read_key_tables

    text = _text([HEAD_2003, "一、本年度主要利润指标", "单位：人民币元", "项 目 金 额", "净利润 29,852,565.09",
                  "二、截至报告期末公司前三年的主要会计数据和财务指标", "单位：人民币千元",
                  "财务指标 2003 年度 2002 年度 2001 年度", "主营业务收入 295,641.36 475,792.79 465,637.32",
                  "净利润 2,985.26 3,591.05 3,706.00", "三、报告期内股东权益变动情况"])
    kt = read_key_tables(text)
    assert "net_profit" not in kt.rows and kt.withheld["net_profit"].startswith("两表本年数不符")
    assert kt.rows["revenue"].current == 2.9564136 and kt.rows["revenue"].prior == 4.7579279  # no change column


def test_a_bare_net_profit_gives_way_to_an_owners_row_however_named():
    """净利润 (the group's, minorities in) beside 归属于本银行股东的净利润 (an owner's wording no pattern names):
    the bare row is not the company's profit."""
    from xladdin.reading.tables import read_key_tables

    text = _text(["2023年年度报告", "七、近三年主要会计数据和财务指标", "单位：人民币百万元",
                  "项目 2023年 2022年 本年比上年增减(%) 2021年", "营业收入 180,441 184,951 -2.44 168,804",
                  "净利润 54,000 35,000 54.29 34,000", "归属于本银行股东的净利润 53,819 34,309 56.87 34,381",
                  "八、境内外会计准则下会计数据差异"])
    assert "net_profit" not in read_key_tables(text).rows


def test_a_statement_of_group_and_parent_columns_interleaved_gives_the_group_s():
    from xladdin.reading.tables import read_key_tables

    def margin(columns: str) -> tuple[float | None, float | None] | str:
        text = _text(["第三节 会计数据和业务数据摘要", "一、本年度主要利润指标", "单位：人民币元", "项目 金额",
                      "净利润 1,000.00", "第四节 股本变动及股东情况"],
                     ["利润及利润分配表", "单位：人民币元", "项目 2003 年度 2002 年度", columns,
                      "一、主营业务收入 1,000.00 400.00 800.00 300.00",
                      "减：主营业务成本 600.00 100.00 520.00 90.00"])
        kt = read_key_tables(text)
        return (kt.statement.margin(0), kt.statement.margin(1)) if kt.statement else kt.withheld["gross_margin"]

    assert margin("合并 母公司 合并 母公司") == (40.0, 35.0)  # this year's group and parent, then last year's
    assert margin("合并 合并 母公司 母公司") == (40.0, 75.0)  # the group's two years first: 1,000 and 400
    assert "4个数" in margin("母公司 合并 母公司 合并")  # another order: not read, and why


def test_a_three_year_table_without_a_unit_line_of_its_own_takes_none_from_the_table_before():
    """The three-year table titled without a number and no unit line under it: its 万元 figures are not read in
    the one-year table's 元 (revenue missing, and why); 净利润 keeps the one-year table's figure alone."""
    from xladdin.reading.tables import read_key_tables

    text = _text([HEAD_2003, "一、本年度主要利润指标", "单位：人民币元", "项 目 金 额", "净利润 29,852,565.09",
                  "经营活动产生的现金流量净额 (105,584,555.56)", "截至报告期末公司前三年的主要会计数据和财务指标",
                  "财务指标 2003 年度 2002 年度 2001 年度", "主营业务收入 29,564.14 47,579.28 46,563.73",
                  "净利润 2,985.26 3,591.05 3,706.00", "三、报告期内股东权益变动情况"])
    kt = read_key_tables(text)
    assert "revenue" not in kt.rows and kt.withheld["revenue"].startswith("表格未写单位")
    assert (kt.rows["net_profit"].current, kt.rows["net_profit"].prior) == (0.2985256509, None)
    assert kt.rows["operating_cash_flow"].current == -1.0558455556


def test_restated_columns_with_the_change_named_between_them():
    """2004's form: 调整后 调整前 本期比上期增减(%) 调整后 调整前 under the prior years; EPS and ROE each 全面摊薄
    and 加权平均 in the table itself: EPS 全面摊薄, ROE 加权平均."""
    from xladdin.reading.tables import read_key_tables

    restated = "调整后 调整前 本期比上期增减(%) 调整后 调整前"
    text = _text(["示例股份有限公司 2004 年年度报告",
                  "(三)报告期末公司前三年主要会计数据和财务指标 单位:元 币种:人民币",
                  "主要会计数据 2004 年 2003 年 2002 年", restated,
                  "主营业务收入 3,616,548,554.58 2,811,684,874.80 2,811,000,000.00 28.63 2,188,895,239.39 "
                  "2,188,895,239.39",
                  "净利润 60,256,224.43 35,044,249.19 35,044,249.19 75.19 59,664,564.39 59,664,564.39",
                  "扣除非经常性损益的", "净利润 61,639,327.36 27,129,209.06 27,129,209.06 131.40 50,474,202.41 "
                  "50,474,202.41",
                  "主要财务指标 2004 年 2003 年 2002 年", restated,
                  "每股收益(全面摊薄) 0.12 0.13 0.13 -2.69 0.24 0.24",
                  "净资产收益率 (全面摊薄) (%) 5.22 3.13 3.13 69.65 6.91 6.91",
                  "每股收益(加权平均) 0.12 0.11 0.11 13.52 0.24 0.24",
                  "净资产收益率 (加权平均) (%) 5.29 3.90 3.90 38.21 7.22 7.22",
                  "扣除非经常性损益的净利润的净资产收益率 (加权平均) (%) 5.42 3.02 3.02 82.45 6.11 6.11",
                  "(四)报告期内股东权益变动情况"])
    rows = read_key_tables(text).rows
    assert (rows["revenue"].prior, rows["revenue"].change) == (28.116848748, 28.63)  # 调整后
    assert (rows["net_profit"].current, rows["net_profit_deducted"].current) == (0.6025622443, 0.6163932736)
    assert (rows["eps"].current, rows["eps"].prior) == (0.12, 0.13)
    assert (rows["roe"].current, rows["roe"].prior, rows["roe"].change) == (5.29, 3.90, 38.21)
