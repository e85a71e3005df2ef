"""Key-figure tables of banks, insurers, brokers and real-estate companies, each a generated annual report
(ruled tables, as reports print them) scored by ``xladdin eval`` through the CLI: a bank's change column
after all its years, the 2013-era bank template (营业净收入, 净利润 above 归属于本行股东的净利润, the ratios in a
table of their own on the next page), an insurer's 保险业务收入 beside its 营业收入, and a 合并利润表 whose
营业成本 stands under 营业总成本 (or is not printed at all). Every figure right, or missing with the reason."""

from __future__ import annotations

import pytest
from ruled import write_ruled_pdf
from test_layouts import score, verdicts

pytest.importorskip("pdfplumber")

W5 = [170, 85, 85, 85, 100]
BANK_HEAD = "示例银行股份有限公司 2022 年年度报告"
# three years, then the change (a parenthesised percent a negative one): the third year is no change
CHANGE_LAST = [[BANK_HEAD, "第二章 会计数据和财务指标摘要", "一、主要会计数据和财务指标", "单位：人民币百万元",
                (W5, [["项目", "2022年", "2021年", "2020年", "本年比上年增减"],
                      ["营业收入", "179,895", "169,383", "153,542", "6.2%"],
                      ["归属于本行股东的净利润", "44,508", "46,455", "45,516", "(4.2%)"],
                      ["经营活动产生的现金流量净额", "(25,120)", "56,734", "102,380", "不适用"],
                      ["基本每股收益（元/股）", "2.20", "2.28", "2.34", "(3.5%)"],
                      ["加权平均净资产收益率", "12.36%", "10.85%", "9.58%", "+1.51 个百分点"]]),
                "二、境内外会计准则下会计数据差异"]]
# the change's header wrapped (本年比上年 / 增减): the text layer prints its words on lines of their own after the
# years, so the text cannot place it; the table read by its cells can
CHANGE_LAST_WRAPPED = [[*CHANGE_LAST[0][:4], (W5, [["项目", "2022年", "2021年", "2020年", "本年比上年\n增减"],
                                                  *CHANGE_LAST[0][4][1][1:]]), CHANGE_LAST[0][5]]]
CHANGE_LAST_GOLD = {"revenue": 179895e6, "net_profit": 44508e6, "net_profit_prev": 46455e6,
                    "net_profit_change_pct": -4.2, "ocf": -25120e6, "eps": 2.20, "roe": 12.36,
                    "gross_margin": None, "gross_margin_prev": None}

# the 2013-era bank template: 营业净收入, the group's 净利润 above the owners', the ratios on the next page
BANK_2013_HEAD = "示例银行股份有限公司 2013 年年度报告"
BANK_2013 = [[BANK_2013_HEAD, "第三节 会计数据和财务指标摘要", "一、主要会计数据", "单位：人民币百万元",
              (W5, [["项目", "2013年", "2012年", "本年比上年增减(%)", "2011年"],
                    ["营业净收入", "52,189", "29,578", "76.45", "20,574"],
                    ["营业利润", "20,211", "17,560", "15.10", "13,530"],
                    ["净利润", "15,436", "13,512", "14.24", "10,390"],
                    ["归属于本行股东的净利润", "15,231", "13,403", "13.64", "10,279"],
                    ["归属于本行股东的扣除非经常\n性损益后的净利润", "15,097", "13,380", "12.83", "10,193"]])],
             [BANK_2013_HEAD, "二、主要财务指标",
              (W5, [["项目", "2013年", "2012年", "本年比上年增减", "2011年"],
                    ["基本每股收益（元）", "1.56", "1.62", "(3.70)", "1.25"],
                    ["加权平均净资产收益率（%）", "16.56", "17.13", "减少0.57个百分点", "18.09"]]),
              "三、境内外会计准则下会计数据差异"]]
BANK_2013_GOLD = {"revenue": 52189e6, "net_profit": 15231e6, "net_profit_prev": 13403e6,
                  "net_profit_change_pct": 13.64, "net_profit_ex": 15097e6, "eps": 1.56, "roe": 16.56,
                  "gross_margin": None, "gross_margin_prev": None}

# an insurer: 保险业务收入 (its premiums) above 营业收入, 归属于母公司股东的净利润
INSURER_HEAD = "示例保险股份有限公司 2023 年年度报告"
INSURER = [[INSURER_HEAD, "第二节 会计数据和财务指标摘要", "三、主要会计数据和财务指标", "单位：人民币百万元",
            (W5, [["项目", "2023年", "2022年", "本年比上年增减(%)", "2021年"],
                  ["保险业务收入", "645,000", "615,000", "4.88", "620,000"],
                  ["营业收入", "832,000", "826,000", "0.73", "844,000"],
                  ["归属于母公司股东的净利润", "46,181", "32,083", "43.94", "50,921"],
                  ["基本每股收益（元）", "1.63", "1.13", "44.25", "1.80"],
                  ["加权平均净资产收益率（%）", "9.55", "6.66", "增加2.89个百分点", "11.30"]]),
            "第三节 管理层讨论与分析"]]
INSURER_GOLD = {"revenue": 832000e6, "net_profit": 46181e6, "net_profit_prev": 32083e6,
                "net_profit_change_pct": 43.94, "eps": 1.63, "roe": 9.55, "gross_margin": None,
                "gross_margin_prev": None}

# real estate: the 合并利润表's 营业收入 and 营业成本 each under its total (其中：), the total cost's other rows
# (taxes, expenses) below; and one printing the totals alone: no gross margin from 营业总成本
ESTATE_HEAD = "示例地产股份有限公司 2023 年年度报告"
ESTATE_TABLE = (W5, [["项目", "2023年", "2022年", "本年比上年增减(%)", "2021年"],
                     ["营业收入", "1,000,000,000.00", "800,000,000.00", "25.00", "700,000,000.00"],
                     ["归属于上市公司股东的净利润", "80,000,000.00", "60,000,000.00", "33.33", "50,000,000.00"]])
ESTATE_KEY = [ESTATE_HEAD, "第二节 公司简介和主要财务指标", "七、主要会计数据和财务指标", "单位：元 币种：人民币",
              ESTATE_TABLE, "八、境内外会计准则下会计数据差异"]
W4 = [170, 60, 110, 110]
ESTATE_STATEMENT = [ESTATE_HEAD, "第十节 财务报告", "合并利润表", "单位：元 币种：人民币",
                    (W4, [["项目", "附注", "2023年度", "2022年度"],
                          ["一、营业总收入", "", "1,000,000,000.00", "800,000,000.00"],
                          ["其中：营业收入", "七、61", "1,000,000,000.00", "800,000,000.00"],
                          ["二、营业总成本", "", "850,000,000.00", "690,000,000.00"],
                          ["其中：营业成本", "七、61", "700,000,000.00", "600,000,000.00"],
                          ["税金及附加", "七、62", "90,000,000.00", "50,000,000.00"],
                          ["销售费用", "七、63", "60,000,000.00", "40,000,000.00"]]),
                    "母公司利润表"]
ESTATE = [ESTATE_KEY, ESTATE_STATEMENT]
ESTATE_GOLD = {"revenue": 1e9, "net_profit": 8e7, "net_profit_prev": 6e7, "net_profit_change_pct": 33.33,
               "gross_margin": 30.0, "gross_margin_prev": 25.0}
TOTALS_ONLY = [ESTATE_KEY, [ESTATE_HEAD, "第十节 财务报告", "合并利润表", "单位：元 币种：人民币",
                            (W4, [["项目", "附注", "2023年度", "2022年度"],
                                  ["一、营业总收入", "七、61", "1,000,000,000.00", "800,000,000.00"],
                                  ["二、营业总成本", "七、61", "850,000,000.00", "690,000,000.00"],
                                  ["税金及附加", "七、62", "90,000,000.00", "50,000,000.00"]]),
                            "母公司利润表"]]
TOTALS_ONLY_GOLD = {**ESTATE_GOLD}  # 营业成本 (700,000,000.00) not printed: the margin missing, never 15%

LAYOUTS: dict[str, tuple[list[list], dict]] = {
    "bank_change_after_the_years": (CHANGE_LAST, CHANGE_LAST_GOLD),
    "bank_change_header_wrapped": (CHANGE_LAST_WRAPPED, CHANGE_LAST_GOLD),
    "bank_2013_template": (BANK_2013, BANK_2013_GOLD),
    "insurer_premiums_and_revenue": (INSURER, INSURER_GOLD),
    "real_estate_cost_under_total_cost": (ESTATE, ESTATE_GOLD),
    "real_estate_totals_only": (TOTALS_ONLY, TOTALS_ONLY_GOLD),
}


@pytest.fixture(scope="module")
def scored(tiny_model_path, tmp_path_factory):
    return score(LAYOUTS, write_ruled_pdf, tiny_model_path, tmp_path_factory.mktemp("kinds"), 600400)


def test_no_report_kind_gives_a_wrong_figure(scored):
    _, report, stdout = scored
    assert all(f["wrong"] == 0 for f in report["fields"].values()), stdout


@pytest.mark.parametrize("layout", ["bank_change_after_the_years", "bank_change_header_wrapped", "bank_2013_template",
                                    "insurer_premiums_and_revenue", "real_estate_cost_under_total_cost"])
def test_every_figure_of_the_report_kind_is_right(scored, layout):
    rows, _, _ = scored
    gold = LAYOUTS[layout][1]
    assert verdicts(rows[layout]) == {k: "right" for k, v in gold.items() if v is not None}, rows[layout]


def test_a_bank_s_change_column_after_its_years_is_the_change(scored):
    for layout in ("bank_change_after_the_years", "bank_change_header_wrapped"):
        row = scored[0][layout]
        assert row["net_profit_change_pct"]["read"] == -4.2  # not 45,516 (2020's figure)
        assert row["roe"]["read"] == 12.36 and "数据存疑" not in row["notes"], row


def test_banks_and_insurers_say_why_they_have_no_gross_margin(scored):
    for layout in ("bank_change_after_the_years", "bank_2013_template", "insurer_premiums_and_revenue"):
        notes = scored[0][layout]["notes"]
        assert "缺毛利率: 银行/保险的利润表无营业成本, 不计毛利率" in notes, (layout, notes)


def test_a_statement_of_totals_alone_gives_no_gross_margin_and_says_why(scored):
    row = scored[0]["real_estate_totals_only"]
    assert verdicts(row) == {**dict.fromkeys(["revenue", "net_profit", "net_profit_prev", "net_profit_change_pct"],
                                             "right"), "gross_margin": "missing", "gross_margin_prev": "missing"}, row
    assert "缺毛利率: 合并利润表只印营业总收入与营业总成本(营业总成本含税金及附加与期间费用, 不是营业成本), " \
           "未印营业收入与营业成本, 不计毛利率" in row["notes"], row["notes"]


# ------------------------------------------------------------------ the same traits in a text, read directly
def _text(*pages: list[str]) -> str:
    return "\f".join("\n".join(p) for p in pages)


def test_the_change_column_is_placed_by_the_header_s_order():
    """The change last (a bank's three years, then 本年比上年增减; its words wrapped after the years), between
    (today's), or its words begun on a line of no year (where it stands not known: today's template's place,
    after last year's)."""
    from xladdin.reading.tables import read_key_tables

    def read(header: list[str], row: str) -> tuple[float | None, float | None, float | None]:
        text = _text(["2022年年度报告", "六、主要会计数据和财务指标", "单位：人民币百万元", *header, row,
                      "七、境内外会计准则下会计数据差异"])
        r = read_key_tables(text).rows["net_profit"]
        return r.current, r.prior, r.change

    last = "归属于本行股东的净利润 44,508 46,455 45,516 (4.2%)"
    assert read(["项目 2022年 2021年 2020年 本年比上年增减"], last) == (445.08, 464.55, -4.2)
    assert read(["2022年 2021年 2020年 本年比上年", "增减(%)"], last) == (445.08, 464.55, -4.2)
    between = "归属于本行股东的净利润 44,508 46,455 -4.2 45,516"
    assert read(["项目 2022年 2021年 本年比上年增减(%) 2020年"], between) == (445.08, 464.55, -4.2)
    assert read(["2022年 2021年", "本报告期比", "上年同期 2020年", "经营业绩 增减(%)"], between) == (
        445.08, 464.55, -4.2)


def test_a_wrapped_change_header_in_a_text_is_placed_by_a_money_row():
    """The change's header words on lines of their own (the text of a table without ruling lines): where it
    stands is not known from the header, but a money row shows it (the third column 153,542, the last 6.2%),
    and the table's other rows follow it; without such a row, today's place."""
    from xladdin.reading.tables import read_key_tables

    def rows(*lines: str) -> dict[str, tuple[float | None, float | None, float | None]]:
        text = _text(["2022年年度报告", "六、主要会计数据和财务指标", "单位：人民币百万元", "项目 2022年 2021年 2020年",
                      "本年比上年", "增减", *lines, "七、境内外会计准则下会计数据差异"])
        return {n: (r.current, r.prior, r.change) for n, r in read_key_tables(text).rows.items()}

    got = rows("营业收入 179,895 169,383 153,542 6.2%", "归属于本行股东的净利润 44,508 46,455 45,516 (4.2%)",
               "基本每股收益（元/股） 2.20 2.28 2.34 (3.5%)")
    assert got == {"revenue": (1798.95, 1693.83, 6.2), "net_profit": (445.08, 464.55, -4.2), "eps": (2.2, 2.28, -3.5)}
    today = rows("营业收入 179,895 169,383 6.21% 153,542")  # today's: the change third
    assert today == {"revenue": (1798.95, 1693.83, 6.21)}


def test_an_insurer_s_premiums_are_its_revenue_only_where_no_revenue_row_is_printed():
    from xladdin.reading.tables import read_key_tables

    def revenue(*rows: str) -> float | None:
        text = _text(["2023年年度报告", "三、主要会计数据和财务指标", "单位：人民币百万元",
                      "项目 2023年 2022年 本年比上年增减(%) 2021年", *rows, "第三节 管理层讨论与分析"])
        r = read_key_tables(text).rows.get("revenue")
        return r.current if r else None

    premiums, revenue_row = "保险业务收入 645,000 615,000 4.88 620,000", "营业收入 832,000 826,000 0.73 844,000"
    assert revenue(premiums, revenue_row) == 8320.0
    assert revenue(revenue_row, premiums) == 8320.0
    assert revenue(premiums) == 6450.0
    # the 合并利润表's 营业收入, where it prints one, is the revenue: not the premiums
    text = _text(["2023年年度报告", "三、主要会计数据和财务指标", "单位：人民币百万元",
                  "项目 2023年 2022年 本年比上年增减(%) 2021年", premiums, "第三节 管理层讨论与分析"],
                 ["第十节 财务报告", "合并利润表", "单位：人民币百万元", "项目 附注 2023年度 2022年度",
                  "一、营业收入 832,000 826,000", "其中：已赚保费 600,000 590,000"])
    kt = read_key_tables(text)
    assert "revenue" not in kt.rows and kt.second["revenue"].current == 8320.0


def test_a_bank_s_bare_net_profit_row_with_the_change_last():
    """平安银行's form: 净利润 (no 归属于本行 row) in three years, then the change in brackets."""
    from xladdin.reading.tables import read_key_tables

    text = _text(["2022年年度报告", "六、主要会计数据和财务指标", "单位：人民币百万元",
                  "项目 2022年 2021年 2020年 本年比上年增减", "营业收入 179,895 169,383 153,542 6.2%",
                  "利息净收入 122,000 119,000 109,000 2.5%", "净利润 44,508 46,455 45,516 (4.2%)",
                  "七、境内外会计准则下会计数据差异"])
    kt = read_key_tables(text)
    row = kt.rows["net_profit"]
    assert (row.current, row.prior, row.change) == (445.08, 464.55, -4.2)
    assert kt.rows["revenue"].change == 6.2 and kt.bank


def test_an_insurer_known_by_its_statement_alone_has_no_gross_margin_and_says_why():
    """A key table naming no insurer's row (营业收入, 归属于母公司股东的净利润): its 合并利润表's 已赚保费, and no
    营业成本, say what it is."""
    from xladdin.reading.tables import read_key_tables

    text = _text(["2023年年度报告", "三、主要会计数据和财务指标", "单位：人民币百万元",
                  "项目 2023年 2022年 本年比上年增减(%) 2021年", "营业收入 832,000 826,000 0.73 844,000",
                  "归属于母公司股东的净利润 46,181 32,083 43.94 50,921", "第三节 管理层讨论与分析"],
                 ["公司的经营情况。" * 1000],  # the statements far from the key table, as in a report
                 ["第十节 财务报告", "合并利润表", "单位：人民币百万元", "项目 附注 2023年度 2022年度",
                  "一、营业收入 832,000 826,000", "已赚保费 600,000 590,000", "二、营业支出 780,000 790,000"])
    kt = read_key_tables(text)
    assert kt.bank and kt.withheld["gross_margin"] == "银行/保险的利润表无营业成本, 不计毛利率"
