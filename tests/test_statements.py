"""The statements as a second source of the key figures: the 合并利润表 (营业收入 / 营业总收入, 归属于母公司
股东的净利润, 基本每股收益) and the 合并现金流量表 (经营活动产生的现金流量净额), read beside the key-figure table,
through ``xladdin screen --reports``: agreeing, a figure is checked twice and both quotes are shown;
disagreeing, the row is 数据存疑 with both; where the table has no row, the statement's figure stands
with its own quote. Never a parent company's statement, never a segment's figure."""

from __future__ import annotations

from test_layouts import screen_one

KEY_TABLE = ["2023年年度报告", "第二节 公司简介和主要财务指标", "七、近三年主要会计数据和财务指标", "(一) 主要会计数据",
             "单位：元 币种：人民币", "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
             "营业收入 1,000,000,000.00 800,000,000.00 25.00 700,000,000.00",
             "归属于上市公司股东的净利润 120,000,000.00 100,000,000.00 20.00 90,000,000.00",
             "(二) 主要财务指标", "主要财务指标 2023年 2022年 本期比上年同期增减(%) 2021年",
             "基本每股收益（元／股） 0.60 0.50 20.00 0.45", "八、境内外会计准则下会计数据差异"]


def statements(profit: str = "120,000,000.00", eps: str = "0.6012") -> list[list[str]]:
    """The 合并利润表 (its profit label over two lines, the figures on the second; note references in
    Chinese numerals), the parent's (other figures), the 合并现金流量表 and the parent's."""
    return [["第十节 财务报告", "合并利润表", "2023 年 1—12 月", "单位:元 币种:人民币",
             "项目 附注 本期发生额 上期发生额",
             "一、营业总收入 1,000,000,000.00 800,000,000.00",
             "其中：营业收入 七、（四十一） 1,000,000,000.00 800,000,000.00",
             "二、营业总成本 900,000,000.00 700,000,000.00",
             "其中：营业成本 七、（四十一） 600,000,000.00 520,000,000.00",
             "五、净利润（净亏损以“－”号填列） 130,000,000.00 110,000,000.00",
             "1.归属于母公司股东的净利润", f"（净亏损以“-”号填列） {profit} 100,000,000.00",
             "（一）基本每股收益(元/股) " + f"{eps} 0.5000",
             "母公司利润表", "单位:元 币种:人民币", "一、营业收入 400,000,000.00 300,000,000.00",
             "五、净利润 50,000,000.00 40,000,000.00"],
            ["合并现金流量表", "单位：元 币种：人民币", "项目 附注 本期发生额 上期发生额",
             "经营活动现金流入小计 1,100,000,000.00 900,000,000.00",
             "经营活动产生的现金流量净额 210,000,000.00 150,000,000.00",
             "母公司现金流量表", "单位：元 币种：人民币", "经营活动产生的现金流量净额 90,000,000.00 80,000,000.00"]]


def test_figures_both_sources_state_are_checked_twice_with_both_quotes(tiny_model_path, tmp_path):
    row = screen_one(tiny_model_path, tmp_path, "600100,示例股份,制造", [KEY_TABLE, *statements()])
    assert row["营收(亿元) revenue"] == 10.0 and row["净利润(亿元) net profit"] == 1.2
    evidence = row["出处 evidence"]
    assert ("营收「营业收入 1,000,000,000.00 800,000,000.00 25.00 700,000,000.00」(第1页) "
            "=合并利润表「其中：营业收入 七、（四十一） 1,000,000,000.00 800,000,000.00」(第2页)") in evidence
    # the profit's label over two lines: both in the statement's quote
    assert "=合并利润表「1.归属于母公司股东的净利润 （净亏损以“-”号填列） 120,000,000.00 100,000,000.00」" in evidence
    assert "=合并利润表「（一）基本每股收益(元/股) 0.6012 0.5000」" in evidence  # 0.60 printed to two decimals
    assert "数据存疑" not in (row["标记 flags"] or "")
    # the table has no 经营活动产生的现金流量净额 row: the 合并现金流量表's (never the parent's), with its quote
    assert row["经营现金流(亿元) operating cash flow"] == 2.1
    assert "经营现金流「合并现金流量表 经营活动产生的现金流量净额 210,000,000.00 150,000,000.00」(第3页)" in evidence


def test_a_statement_that_disagrees_with_the_table_makes_the_row_doubtful_with_both(tiny_model_path, tmp_path):
    row = screen_one(tiny_model_path, tmp_path, "600100,示例股份,制造",
                     [KEY_TABLE, *statements(profit="150,000,000.00", eps="0.7500")])
    assert "数据存疑" in row["标记 flags"]
    notes = row["说明 notes"]
    assert ("净利润: 表格1.2「归属于上市公司股东的净利润 120,000,000.00 1」 vs "
            "合并利润表1.5「1.归属于母公司股东的净利润") in notes
    assert ("EPS: 表格0.6「基本每股收益（元／股） 0.60 0.50 20.00 0.」 vs "
            "合并利润表0.75「（一）基本每股收益(元/股) 0.7500") in notes
    assert row["净利润(亿元) net profit"] == 1.2  # the table's stays, flagged; nothing is averaged or replaced
