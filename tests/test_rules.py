import pytest

from xladdin.tasks.rules import DEFAULT_RULES, Flag, RiskLevel, Rules, assess, relative_gap


def level(**kw):
    kw.setdefault("is_st", False)
    return assess(**kw).risk_level


@pytest.mark.parametrize(
    "roe, pe, expected",
    [
        (4.99, 10, RiskLevel.HIGH),
        (5.0, 10, RiskLevel.MEDIUM),  # 5% ≤ ROE < 15% → 中
        (14.99, 10, RiskLevel.MEDIUM),
        (15.0, 10, RiskLevel.LOW),  # ROE ≥ 15% and PE ≤ 50 → 低
        (15.0, 50.0, RiskLevel.LOW),  # PE = 50 is not > 50
        (15.0, 50.01, RiskLevel.MEDIUM),
        (30, 0, RiskLevel.MEDIUM),  # PE ≤ 0 is a loss, ranked as PE 100 > 50
        (30, -5, RiskLevel.MEDIUM),
        (-3, -5, RiskLevel.HIGH),
        (4, 80, RiskLevel.HIGH),  # high beats medium
    ],
)
def test_risk_level_edges(roe, pe, expected):
    assert level(roe=roe, pe_ttm=pe) == expected


def test_st_is_always_high_and_flagged():
    v = assess(roe=40, pe_ttm=10, is_st=True)
    assert v.risk_level == RiskLevel.HIGH
    assert Flag.ST in v.flags
    assert "ST" in v.basis


def test_two_year_loss_is_high_one_year_is_not():
    assert level(roe=20, pe_ttm=20, net_profit=-1, net_profit_prev=-2) == RiskLevel.HIGH
    assert level(roe=20, pe_ttm=20, net_profit=-1, net_profit_prev=2) == RiskLevel.LOW
    assert Flag.LOSS in assess(roe=20, pe_ttm=20, is_st=False, net_profit=-1, net_profit_prev=2).flags


@pytest.mark.parametrize(
    "roe, pe, score",
    [
        (15, 0.0001, 100),
        (15, 50, 90),  # 100 - 10 - 0
        (10, 20, 71),  # 100 - 4 - 25
        (5, 50, 40),  # 100 - 10 - 50
        (0, 100, 5),  # 100 - 20 - 75
        (-10, 100, 0),  # clamp at 0
        (40, 10, 100),  # clamp at 100
        (14.5, 25, 93),  # 100 - 5 - 2.5 = 92.5 → rounds half up to 93 (as Excel's ROUND)
        (14.7, 15, 96),  # 100 - 3 - 1.5 = 95.5 → 96
    ],
)
def test_score_formula(roe, pe, score):
    assert assess(roe=roe, pe_ttm=pe, is_st=False).score == score


def test_loss_takes_full_pe_penalty():
    v = assess(roe=15, pe_ttm=-8, is_st=False)
    assert v.score == 80  # as PE-TTM = 100: 100 - 20 - 0
    assert Flag.LOSS in v.flags
    assert assess(roe=15, pe_ttm=0, is_st=False).score == 80


def test_missing_values_flag_and_say_which_rule():
    v = assess(roe=None, pe_ttm=20, is_st=False)
    assert Flag.MISSING in v.flags
    assert v.score == 46 and "ROE按5%计" in v.basis  # scored with ROE at the 高 bound: 100 - 4 - 50
    assert v.risk_level == RiskLevel.MEDIUM  # 低 cannot be confirmed without ROE
    assert any("ROE" in n for n in v.notes)
    v = assess(roe=20, pe_ttm=None, is_st=False)
    assert Flag.MISSING in v.flags and any("PE" in n for n in v.notes)
    # a report's row (no PE): scored with PE at the limit, a loss's PE when its profit is negative
    assert assess(roe=12, pe_ttm=None, is_st=False).score == 75  # 100 - 10 - 15
    assert assess(roe=12, pe_ttm=None, is_st=False, net_profit=-1.0).score == 65  # 100 - 20 - 15
    assert assess(roe=None, pe_ttm=None, is_st=False).score is None
    # missing values never hide a rule that can fire
    assert assess(roe=None, pe_ttm=None, is_st=True).risk_level == RiskLevel.HIGH
    assert assess(roe=2, pe_ttm=None, is_st=False).risk_level == RiskLevel.HIGH
    assert assess(roe=None, pe_ttm=60, is_st=False).risk_level == RiskLevel.MEDIUM


def test_rules_are_data():
    strict = Rules(roe_low_risk_from=20, pe_limit=30)
    assert assess(roe=18, pe_ttm=20, is_st=False, rules=strict).risk_level == RiskLevel.MEDIUM
    assert assess(roe=18, pe_ttm=20, is_st=False).risk_level == RiskLevel.LOW
    with pytest.raises(ValueError, match="roe_high_risk_below"):
        Rules(roe_high_risk_below=20, roe_low_risk_from=10)
    with pytest.raises(ValueError, match="Extra inputs"):
        Rules(pe_limt=30)
    assert DEFAULT_RULES.pe_limit == 50


def test_relative_gap():
    assert relative_gap(105, 100) == pytest.approx(0.05)
    assert relative_gap(0, 0) == 0
    assert relative_gap(1, 0) == float("inf")


NO_YEARS = "缺两年净利润: 连续亏损规则未应用"


@pytest.mark.parametrize("given, level, score, basis, flags, notes", [
    # written out from the rules table of docs/rules-and-figures.md: what the cell shows, word for word
    (dict(roe=4, pe_ttm=80), "高", 29, "ROE 4% < 5%", [], [NO_YEARS]),  # 100 - 16 - 55
    (dict(roe=4, pe_ttm=20, is_st=True), "高", 41, "ST; ROE 4% < 5%", ["ST"], [NO_YEARS]),
    (dict(roe=10, pe_ttm=60), "中", 63, "ROE 10% < 15%; PE-TTM 60 > 50", [], [NO_YEARS]),
    (dict(roe=20, pe_ttm=-5), "中", 100, "亏损(PE≤0) > 50", ["亏损"], [NO_YEARS]),
    (dict(roe=30, pe_ttm=400), "中", 95, "PE-TTM 400 > 50", [], [NO_YEARS]),  # 100 - 80 + 75
    (dict(roe=20, pe_ttm=20, net_profit=-1, net_profit_prev=-2), "高", 100, "连续两年亏损", ["亏损"], []),
    (dict(roe=20, pe_ttm=20, net_profit=0, net_profit_prev=-3), "低", 100, "ROE 20% ≥ 15%, PE-TTM 20 ≤ 50", [], []),
    (dict(roe=20, pe_ttm=20, net_profit=0, net_profit_prev=0), "低", 100, "ROE 20% ≥ 15%, PE-TTM 20 ≤ 50", [], []),
    (dict(roe=20, pe_ttm=20, net_profit=-1), "低", 100, "ROE 20% ≥ 15%, PE-TTM 20 ≤ 50", ["亏损"], [NO_YEARS]),
    (dict(roe=20, pe_ttm=20, net_profit=-1, net_profit_prev=0), "低", 100, "ROE 20% ≥ 15%, PE-TTM 20 ≤ 50", ["亏损"],
     []),  # a loss after a year at zero is not two years of losses
    (dict(roe=20, pe_ttm=20, net_profit=-1, net_profit_prev=0.5), "低", 100, "ROE 20% ≥ 15%, PE-TTM 20 ≤ 50",
     ["亏损"], []),
    (dict(roe=20, pe_ttm=20, net_profit_prev=-1), "低", 100, "ROE 20% ≥ 15%, PE-TTM 20 ≤ 50", [], [NO_YEARS]),
    (dict(roe=10, pe_ttm=None), "中", 65, "ROE 10% < 15%; 评分PE-TTM按50计(缺项取界值)", ["数据缺失"],
     ["缺PE-TTM: PE规则未应用", NO_YEARS]),  # 100 - 10 - 25
    (dict(roe=None, pe_ttm=None), "未评", None, "未评: 无ROE与PE-TTM (所给字段与报告均无), 无规则可用", ["数据缺失"],
     ["缺ROE: ROE规则未应用", "缺PE-TTM: PE规则未应用", NO_YEARS, "缺ROE和PE-TTM: 未评分"]),
])
def test_what_the_cell_shows_by_hand(given, level, score, basis, flags, notes):
    v = assess(**{"is_st": False, **given})
    assert (v.risk_level.value, v.score, v.basis, [f.value for f in v.flags], v.notes) == (
        level, score, basis, flags, notes)
