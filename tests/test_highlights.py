"""Results highlights: every number shown is a figure code read or a number in the source; a highlight
with an invented number is dropped and counted (through the CLI's job, the pandas door, a cell)."""

import csv
import json
import os
import re

import openpyxl
import pytest
from conftest import TINY_MAX_TOKENS
from kit import run_cli

import xladdin
from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.jobs.pool_screen import highlights_file
from xladdin.reading.pool import SAMPLE_POOL
from xladdin.settings import Settings
from xladdin.testing import ScriptedEngine

REPORT = ("2023年公司实现营业总收入1505.60亿元，同比增长18.04%；归母净利润747.34亿元，同比增长19.16%；"
          "基本每股收益59.49元，加权平均净资产收益率34.19%。")


def planted(messages):
    """A model answer with one invented number (净利润 900亿元), a rounding (18%) and a unit change (万元)."""
    return json.dumps({"highlights": ["1. 营收1505.6亿元，同比增长18%", "净利润暴增至900亿元，创历史新高",
                                      "归母净利润7473400万元，ROE达34.19%"]}, ensure_ascii=False)


def rows_of(path):
    ws = openpyxl.load_workbook(path)["Results"]
    rows = list(ws.iter_rows(values_only=True))
    return [dict(zip(rows[0], r, strict=True)) for r in rows[1:]], dict(openpyxl.load_workbook(path)["Run"].values)


def test_an_invented_number_is_dropped_and_counted(tmp_path):
    pool = tmp_path / "pool.csv"
    with pool.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["代码", "名称", "财报摘要"], ["600519", "贵州茅台", REPORT],
                                 ["000001", "无文本", ""]])
    settings = Settings.load({"cache_dir": tmp_path / "c"})
    engine = ScriptedEngine(planted)
    with Batcher(engine, Cache(tmp_path / "c")) as b:
        summary = highlights_file(pool, tmp_path / "h.xlsx", settings, progress=False, batcher=b)
    assert summary.rows == 2 and summary.errors == 1  # the row without a report is that row's error
    (row, empty), run = rows_of(tmp_path / "h.xlsx")
    assert row["业绩亮点 highlights"] == "1. 营收1505.6亿元，同比增长18%\n2. 归母净利润7473400万元，ROE达34.19%"
    assert (row["采用 kept"], row["未核实删去 dropped"]) == (2, 1)
    assert row["说明 notes"] == "未核实，未采用「净利润暴增至900亿元，创历史新高」(900亿元)"
    assert "900" not in row["业绩亮点 highlights"] and "净利润/净利增长「归母净利润747.34亿元" in row["出处 evidence"]
    assert empty["错误 error"].startswith("#QWEN! report_text")
    assert (run["highlights_kept"], run["highlights_dropped"]) == (2, 1)
    # 1505.6亿元 18% | 900亿元 | 7473400万元 34.19%: five numbers checked, one not in the source
    assert (row["核对数字 numbers checked"], row["未核实数字 numbers unverified"]) == (5, 1)
    assert (run["numbers_checked"], run["numbers_unverified"]) == (5, 1)
    # fewer points: chosen after the cache, the model is not asked again
    with Batcher(engine, Cache(tmp_path / "c")) as b:
        again = highlights_file(pool, tmp_path / "h1.xlsx", settings, points=1, progress=False, batcher=b)
    (row, _), _ = rows_of(tmp_path / "h1.xlsx")
    assert again.cache_hits == 1 and len(engine.calls) == 1 and row["业绩亮点 highlights"].count("\n") == 0


def test_the_pandas_door_and_a_cell_give_the_same_highlights(tmp_path):
    import pandas as pd

    from xladdin.excel import udfs
    from xladdin.sheet.functions import CellRuntime

    engine = ScriptedEngine(planted)
    df = pd.DataFrame({"代码": ["600519"], "名称": ["贵州茅台"], "财报摘要": [REPORT]})
    with Batcher(engine, Cache(tmp_path / "c")) as b:
        out = xladdin.highlights(df, settings=Settings.load({"cache_dir": tmp_path / "c"}), progress=False, batcher=b)
    assert list(out.columns[:3]) == ["代码", "名称", "财报摘要"] and out.loc[0, "未核实删去 dropped"] == 1
    udfs.set_runtime(CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"))))
    try:
        cell = udfs.QWEN_HIGHLIGHTS(REPORT)  # no company name in the prompt: asked once more
        assert udfs.QWEN_HIGHLIGHTS(REPORT, 1) == cell.splitlines()[0]  # one point: from the cache
        assert udfs.QWEN_HIGHLIGHTS("").startswith("#QWEN! report_text")
        assert udfs.QWEN_HIGHLIGHTS(REPORT, 9).startswith("#QWEN! points")
    finally:
        udfs.set_runtime(None)
    assert cell == out.loc[0, "业绩亮点 highlights"] and len(engine.calls) == 2


@pytest.mark.slow
def test_every_number_the_cli_shows_is_in_the_source(tiny_model_path, tmp_path):
    """``xladdin highlights`` on the sample pool with the test model (random weights: what it writes is
    noise, so what stands is code's): each number shown is written in that row's report."""
    env = dict(os.environ, XLADDIN_MODEL=str(tiny_model_path), XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS),
               XLADDIN_CACHE_DIR=str(tmp_path / "c"))
    r = run_cli("highlights", SAMPLE_POOL, "-o", tmp_path / "h.xlsx", "--no-progress", env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    rows, run = rows_of(tmp_path / "h.xlsx")
    assert run["rows"] == 21 and run["errors"] == 0
    shown = 0
    for row in rows:
        source = row["财报摘要"].replace(",", "")
        for line in (row["业绩亮点 highlights"] or "").splitlines():
            for number in re.findall(r"\d+(?:\.\d+)?", re.sub(r"^\d+\. ", "", line)):
                shown += 1
                assert number in source, (number, line, source)
    assert shown >= 21  # the rows' figures are shown, not dropped


@pytest.mark.parametrize("highlight, source, unverified", [
    ("营收1505.6亿元", "营业总收入1505.60亿元", []),  # fewer digits: a rounding of the source
    ("营收1506亿元", "营业总收入1505.60亿元", []),
    ("营收约1500亿元", "营业总收入1505.60亿元", ["1500亿元"]),  # not a rounding to the digits given
    ("净利润7473400万元", "归母净利润747.34亿元", []),  # 万 and 亿 normalised
    ("产能900亿元", "产能900万吨", ["900亿元"]),  # the same digits in another unit are not the figure
    ("产能150万吨", "未来百亿级 150 万吨绿色新材料", []),
    ("毛利率提升1.5个百分点", "毛利率同比提升1.5个百分点", []),
    ("毛利率35%", "毛利率35.0%", []),
    ("增长35%", "营收35亿元", ["35%"]),  # a percentage is compared as a percentage
    ("2023年营收增长12%", "营收同比增长12.3%", []),  # a year is not a figure
    ("EPS 2.08元", "下调2018-2020EPS为 1.86/1.91/2.08 元", ["2.08元"]),  # a forecast stated as a result
    ("预计2020年EPS 2.08元", "下调2018-2020EPS为 1.86/1.91/2.08 元", []),  # said to be one, it stands
    ("2018年营收和归母净利润13.6亿元", "预计2021年归母净利润13.6亿元", ["13.6亿元"]),
    ("2021年归母净利润预计13.6亿元", "我们预计2019-2021年归母净利润11.2/12.4/13.6亿元", []),
    ("2022年归母净利润预计13.6亿元", "我们预计2019-2021年归母净利润11.2/12.4/13.6亿元", ["13.6亿元"]),
    ("2021E归母净利润13.6亿元", "盈利预测：2021E归母净利润13.6亿元", []),
    ("2019年营收100亿元", "2018年营收100亿元，同比增长10%", ["100亿元"]),  # another year's figure
    ("18年营收100亿元", "2018年营收100亿元，同比增长10%", []),
    ("营收100亿元", "2018年营收100亿元", []),  # no year named: the figure as the source gives it
    ("净利润1505.6亿元", "营业收入1505.60亿元，同比增长18.04%", ["1505.6亿元"]),  # another figure's number
    ("营收增长19.16%", "营业收入1505.60亿元，同比增长18.04%；归母净利润747.34亿元，同比增长19.16%", ["19.16%"]),
    ("营收和归母净利润747.34亿元", "归母净利润747.34亿元，同比增长19.16%", []),
    ("营收同比增长4.49%", "营业收入同比下降4.49%", ["4.49%"]),  # the change said to go the wrong way
    ("营收同比下降4.49%", "营业收入同比下降4.49%", []),
    ("营收增长4.49%", "营业收入1,175,301,034.32元，同比-4.49%", ["4.49%"]),
    ("毛利率提升至35%", "毛利率35.0%，同比下降2个百分点", []),  # 提升至: a level, not a change
    ("归母净利润增长28.95%", "归属于上市公司股东的净利润 129,465,020.68 182,223,387.13 -28.95", ["28.95%"]),
])
def test_the_check_by_hand(highlight, source, unverified):
    from xladdin.reading.figures import read_figures
    from xladdin.tasks.highlights import check

    assert check(highlight, source, read_figures(source)) == unverified


def test_last_year_s_figures_from_a_report_table_check_in_their_own_units():
    from xladdin.reading.figures import read_figures
    from xladdin.tasks.highlights import check

    table = "\n".join(["(一) 主要会计数据", "单位：万元", "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
                       "营业收入 52,310.50 48,002.10 8.98 40,100.00",
                       "(二) 主要财务指标", "主要财务指标 2023年 2022年 本期比上年同期增减(%) 2021年",
                       "基本每股收益（元／股） 0.25 0.08 212.50 0.19",
                       "加权平均净资产收益率（%） 4.10 1.32 增加2.78个百分点 2.95"])
    figures = read_figures(table)
    assert figures["eps_prev"].value == 0.08 and figures["roe_prev"].value == 1.32
    assert check("上年EPS 0.08元/股，上年ROE 1.32%", table, figures) == []
    assert check("上年ROE 1.33%", table, figures) == ["1.33%"]
    assert check("上年营收4.80亿元", table, figures) == []  # 48,002.10万元


NOTE = ("公司今日公布2018年业绩预告，报告期内公司预计实现净利润84.5-87.5亿元；去年同期实现归母净利润41.21亿元，"
        "折合EPS为1.37元。我们预计2019-2021年归母净利润11.2/12.4/13.6亿元，维持增持评级。"
        "2018年公司实现营业收入216.51亿元，同比增长12.5%。")


def writer_answer(body):
    """A model that states a forecast as a result, writes a period alone, repeats itself and invents a year."""
    said = ["2018年公司营收和归母净利润13.6亿元", "18Q4", "2018年营收216.51亿元，同比增长12.5%",
            "2018年营收216.51亿元，同比增长12.5%。", "预计2021年归母净利润13.6亿元"]
    if "41.21" not in body["messages"][-1]["content"]:  # the second note: a figure of another year
        said = ["2019年营收216.51亿元，同比增长12.5%"]
    text = json.dumps({"highlights": said}, ensure_ascii=False)
    return 200, "application/json", json.dumps({"choices": [{"index": 0, "finish_reason": "stop",
                                                             "message": {"role": "assistant", "content": text}}],
                                                "usage": {"prompt_tokens": 10, "completion_tokens": 10}}).encode()


def test_a_writer_s_notes_file_without_codes_gets_numbered_rows_and_no_forecast_as_a_result(tmp_path):
    """``xladdin highlights`` on a broker-notes file with one text column (no codes: its rows are numbered),
    through a real HTTP engine: a forecast stated as a result and another year's figure are dropped, a
    period alone and a repeat are no highlights, a forecast said to be one stands, last year's figures
    are never this year's, and a row without a highlight says why (issue 46)."""
    from conftest import Server, vllm_models

    notes = tmp_path / "notes.csv"
    with notes.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["研报正文"], [NOTE], ["行业景气度下行，公司维持增持评级。"]])
    server = Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": writer_answer})
    try:
        env = {**os.environ, "XLADDIN_ENGINE_URL": server.url, "XLADDIN_CACHE_DIR": str(tmp_path / "c")}
        r = run_cli("highlights", notes, "-o", tmp_path / "h.xlsx", "--no-progress", env=env)
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    (first, second), _ = rows_of(tmp_path / "h.xlsx")
    assert (first["行号"], second["行号"]) == (1, 2)
    assert first["业绩亮点 highlights"] == "1. 2018年营收216.51亿元，同比增长12.5%\n2. 预计2021年归母净利润13.6亿元"
    assert first["说明 notes"] == "未核实，未采用「2018年公司营收和归母净利润13.6亿元」(13.6亿元)"
    assert "41.21" not in first["出处 evidence"] and "1.37" not in first["出处 evidence"]  # last year's
    # the forecasts, beside the results with their years and words
    assert first["预测(非实际) forecasts"].splitlines() == [
        "预测(2018年)「公司今日公布2018年业绩预告,报告期内公司预计实现净利润84.5-87.5亿元」",  # as the task reads it
        "预测(2019-2021年)「我们预计2019-2021年归母净利润11.2/12.4/13.6亿元,维持增持评级」"]
    assert second["预测(非实际) forecasts"] in (None, "")
    assert second["业绩亮点 highlights"] in (None, "")
    assert second["说明 notes"].startswith("未核实，未采用「2019年营收216.51亿元")
    assert "本行无亮点" in second["说明 notes"]
