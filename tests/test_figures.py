"""Code reading of figures from report text: the explicit patterns, quotes and their checks."""

import pytest

from xladdin.reading.figures import loss_statement, normalize, quote_supports, read_figures


@pytest.mark.parametrize(
    "text, name, value, quote",
    [
        ("归属于上市公司股东的净利润-5,657,115.16元", "net_profit", -0.0565711516,
         "归属于上市公司股东的净利润-5,657,115.16元"),
        ("营业收入1505.60亿元，同比增长18.04%", "revenue", 1505.6, "营业收入1505.60亿元，同比增长18.04%"),
        ("营业收入1505.60亿元，同比增长18.04%", "revenue_growth", 18.04, "营业收入1505.60亿元，同比增长18.04%"),
        ("归母净利润12.5亿元，同比下降3.2%", "net_profit_growth", -3.2, "归母净利润12.5亿元，同比下降3.2%"),
        ("归属于上市公司股东的净利润10957.65万元，同比增长-2.28%", "net_profit_growth", -2.28,
         "归属于上市公司股东的净利润10957.65万元，同比增长-2.28%"),  # a fall written as negative growth
        ("全年净亏损2.3亿元", "net_profit", -2.3, "净亏损2.3亿元"),
        ("营业收入１，２３４．５万元", "revenue", 0.12345, "营业收入１，２３４．５万元"),  # full-width, as written
        ("营收 55671.14 万元", "revenue", 5.567114, "营收 55671.14 万元"),  # spaces
        ("基本每股收益为0.65元", "eps", 0.65, "基本每股收益为0.65元"),
        ("加权平均净资产收益率34.19%", "roe", 34.19, "加权平均净资产收益率34.19%"),
        ("毛利率91.96%，销售净利率52.5%", "net_margin", 52.5, "销售净利率52.5%"),
        ("扣除非经常性损益后的净利润1亿元，净利润2亿元", "net_profit", 2.0, "净利润2亿元"),
    ],
)
def test_explicit_statements_are_read_with_their_quote(text, name, value, quote):
    reading = read_figures(text)[name]
    assert reading.value == pytest.approx(value) and reading.quote == quote and reading.currency == "CNY"


def test_other_currencies_are_recognised_not_converted():
    (reading,) = read_figures("本期亏损3152.1万港元").values()
    assert reading.value is None and reading.currency == "HKD" and reading.quote == "亏损3152.1万港元"
    assert read_figures("营业收入12亿美元")["revenue"].currency == "USD"


@pytest.mark.parametrize(
    "text, loss",
    [("公司业绩由盈转亏", True), ("全年亏损3152.1万港元", True), ("净利润为负", True), ("用未分配利润弥补亏损", False),
     ("扭亏为盈，净利润2亿元", False), ("营业收入增长", False),
     # boilerplate of a whole annual report: others' losses, not the company's result
     ("子公司少数股东分担的当期亏损超过了少数股东在该子公司期初所有者权益中所享有的份额", False),
     ("可抵扣亏损的确认以很可能取得的应纳税所得额为限", False), ("以前年度未弥补亏损", False),
     ("亏损合同产生的义务满足规定条件的确认为预计负债", False)],
)
def test_a_reported_loss_is_found(text, loss):
    assert (loss_statement(text) is not None) is loss


def test_a_quote_must_be_in_the_text_and_state_the_number():
    text = "2023年营业收入1505.60亿元，归母净利润 747.34 亿元；亏损子公司3家。"
    assert quote_supports(text, "营业收入1505.60亿元", 1505.6, "亿元")
    assert quote_supports(text, "归母净利润747.34亿元", 7.4734e10 * 1e-8, "亿元")  # whitespace aside
    assert quote_supports(text, "营业收入1505.60亿元", 150560000000 * 1e-8, "亿元")
    assert not quote_supports(text, "营业收入1505.60亿元", 1500, "亿元")  # the number is not the figure
    assert not quote_supports(text, "营业收入1600亿元", 1600, "亿元")  # not in the text
    assert not quote_supports(text, "", 1, "亿元")
    assert quote_supports("本期亏损3.5亿元", "亏损3.5亿元", -3.5, "亿元")  # 亏损 means negative


def test_the_share_count_is_read_in_hundred_millions():
    from xladdin.reading.figures import read_shares

    assert read_shares("公司总股本为125,619.78万股").value == pytest.approx(12.5619780)
    assert read_shares("总股本12.56亿股").quote == "总股本12.56亿股" and read_shares("无股本信息") is None


def test_broker_note_wordings():
    """How research notes write results (wordings from real notes; figures changed)."""
    cases = {
        "实现收入7.24亿,同比增长43.29%,归母净利润2.56亿,同比增长39.20%": (2.56, 39.20),
        "营收19.17亿(+2.83%),归母净利4.15亿(-10.74%),扣非归母净利润4.01亿元(-11.27%)": (4.15, -10.74),
        "营收32.87亿元/+8.54%,归母净利4.64亿元/+20.69%": (4.64, 20.69),
        "上半年实现收入/归母净利润35.9/10.1亿元,同比+25.1%/+0.1%": (10.1, None),
        "公司通过高新技术认定,归母净利同增60.98%至2.90亿元": (2.90, None),
        "实现归属上市公司股东净利润1.36亿元,同比增加37.90%": (1.36, 37.90),
    }
    for text, (profit, growth) in cases.items():
        found = read_figures(text)
        assert found["net_profit"].value == profit, text
        assert found["net_profit"].quote in normalize(text)
        assert (found["net_profit_growth"].value if "net_profit_growth" in found else None) == growth, text


def test_forecasts_and_ranges_are_not_reported_figures():
    for text in ("公司发布业绩预告,预计实现归母净利润1.45亿元至1.53亿元,同比增长79%-88%",
                 "2022年上半年公司预计实现归母净利润5850-6350万元",
                 "归母净利润14.95~16.25亿元,同比增长15%~25%",
                 "盈利预测:我们预测公司2019-2020年归母净利润为6.10亿、7.72亿元",
                 "估值小米渠道收入承压,我们下调22年净利润33%至4.2亿元"):
        assert "net_profit" not in read_figures(text), text
    # a forecast in one sentence does not hide the reported figure of the next
    text = "预计全年增长。2021年实现归母净利润0.87亿元"
    assert read_figures(text)["net_profit"].value == 0.87


def test_a_quote_without_yuan_after_the_scale_is_verified():
    text = "上半年归母净利润5850万,同比增长28%;营收0.92亿"
    assert quote_supports(text, "归母净利润5850万", 0.585, "亿元")
    assert quote_supports(text, "营收0.92亿", 0.92, "亿元")
    assert not quote_supports(text, "归母净利润5850万", 5850, "亿元")  # 万 scales: 5850万 is not 5850亿


def test_a_growth_that_says_neither_way_is_not_read():
    found = read_figures("归母净利润12.5亿元，同比下降-3.2%")
    assert found["net_profit"].value == 12.5 and "net_profit_growth" not in found


def test_a_text_names_the_figures_a_reader_could_find_in_it():
    from xladdin.reading.figures import FIGURES, named_figures

    assert named_figures("") == frozenset()
    assert named_figures("2015年年报：归属于上市公司股东的净利润6272.05万元，同比增长17.73%；基本每股收益1.39元") == {
        "net_profit", "net_profit_growth", "eps"}
    assert named_figures("公司业绩由盈转亏") == {"net_profit", "net_profit_growth"}
    assert named_figures("Revenue rose; gross margin, net margin, ROE and EPS fell; net profit flat.") == set(FIGURES)


@pytest.mark.parametrize("text, absent, kept", [
    # a clause that begins with last year speaks of last year, to the sentence's end (a broker's note)
    ("报告期内公司预计实现净利润84.5-87.5亿元；去年同期实现归母净利润41.21亿元，折合EPS为1.37元。",
     ("net_profit", "eps"), {"net_profit_prev": 41.21}),
    # a comparison with last year is no statement of it
    ("营业收入100亿元，较上年同期增长10%，归母净利润12亿元。", (), {"revenue": 100.0, "net_profit": 12.0}),
    # a clause naming this period again ends last year's
    ("去年同期净利润8亿元，本期实现归母净利润12亿元，基本每股收益1.2元。", (), {"net_profit": 12.0, "eps": 1.2}),
    # a balance at a year's end is no year's profit
    ("公司2018年前三季度实现归母净利润15.34亿元，2017年末公司累计未弥补亏损额为3535.4万元。", ("net_profit_prev",),
     {"net_profit": 15.34}),
])
def test_last_year_s_figures_are_never_this_year_s(text, absent, kept):
    """Issue 46: "去年同期实现归母净利润41.21亿元" was read as this year's profit (and its EPS with it)."""
    read = read_figures(text)
    assert not set(absent) & set(read), {k: read[k].quote for k in set(absent) & set(read)}
    assert {k: read[k].value for k in kept} == pytest.approx(kept)


def test_a_segment_s_figures_are_not_the_company_s():
    """A clause whose subject is a segment or a subsidiary states the part's figures (海翔药业's 医药板块
    "实现净利润2.95亿元" was compared with the company's 7.71亿元), until a clause names the company again."""
    part = ("报告期内，医药板块培南系列持续增长，CDMO/CMO合作产品增加，实现销售收入16.23亿元，同比增长10.52%，"
            "实现净利润2.95亿元，同比增长47.67%；染料板块实现销售收入13.18亿元。")
    assert read_figures(part) == {}
    whole = "报告期内，医药板块持续增长，公司实现营业收入29.4亿元，归母净利润7.7亿元。"
    assert {k: r.value for k, r in read_figures(whole).items()} == {"revenue": 29.4, "net_profit": 7.7}


@pytest.mark.parametrize("text", [
    "公司在年报中对2019年经营目标设定为营业收入48.5亿元(增长30%左右)、净利润14.3亿元(增长25%)。",
    "考虑客户拓展进度，下调2019年营收8.44亿(-6.05%)，归母净利润1.22亿(-22.10%)。",
    "修正后公司预计2018年度归属于上市公司股东的净利润为亏损21亿元。",
    "上调2021-2022年EPS至6.29、7.46元，给予2023年EPS8.74元。",
])
def test_a_target_or_a_forecast_is_no_result(text):
    """Broker notes' targets (目标), revisions (下调, 上调), forecasts (预计, 2023E) and a forecast loss are
    never read as the company's results (checked over the 2,370 notes of ../shared/data's cfbenchmark)."""
    assert read_figures(text) == {}
    assert loss_statement(text) is None
