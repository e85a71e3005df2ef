"""What the starter model's highlights get wrong, where the user reads them: a line that says a phrase
again and again, and a rank said of another item than the source's, are dropped and said why (through
``xladdin highlights`` against a real HTTP engine); the starter model is named on the workbook and by
QWEN_STATUS."""

import json

import pytest

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.testing import ScriptedEngine


def status_rows(engine, tmp_path) -> dict:
    """=QWEN_STATUS() in a cell, its two columns as a dict."""
    from xladdin.excel import udfs
    from xladdin.sheet.functions import CellRuntime

    rt = CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c")))
    udfs.set_runtime(rt)
    try:
        return {row[0]: row[1] for row in udfs.QWEN_STATUS()}
    finally:
        udfs.set_runtime(None)
        rt.batcher.close()


def test_qwen_status_says_the_starter_model_served_by_a_server_is_in_use(tmp_path):
    """The private CPU server (Calc) or a LAN CPU server serving the starter model names it by its file."""
    served = ScriptedEngine(lambda m: "{}", model_id="SmolLM2-135M-Instruct.Q4_1@747cb1f01955")
    assert status_rows(served, tmp_path)["starter model"].startswith("yes")
    qwen = ScriptedEngine(lambda m: "{}", model_id="Qwen3-8B-Q4_K_M@0123456789ab")
    assert status_rows(qwen, tmp_path)["starter model"] == "no"
    unknown = ScriptedEngine(lambda m: "{}", model_id="")  # not started: nothing said of it yet
    assert status_rows(unknown, tmp_path)["starter model"] == "not known until the engine starts"


# 储能 (energy storage) batteries are first for the fifth year; of 动力 (power) batteries the source says no rank
SOURCE = ("2023年公司实现营业总收入4009.17亿元，同比增长22.01%。公司储能电池出货量连续5年全球第一。"
          "动力电池使用量稳步增长，海外客户拓展顺利。")
SAID = {  # what the model wrote of each row, by its company
    "宁德时代": ["营收4009.17亿元，同比增长22.01%", "动力电池使用量连续5年全球第一",
                 "宁德时代储能电池出货量连续五年位居全球第一"],
    "样本公司": ["公司实务实力，公司实务实力，公司实务实力突出", "营收4009.17亿元，公司实务实力强",
                 "储能电池出货量全球第一，公司实务实力领先", "海外客户拓展顺利，公司实务实力雄厚"],
}


def chat(text: str):
    body = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    return 200, "application/json", json.dumps(body).encode()


def answer(body):
    asked = body["messages"][-1]["content"]
    said = next(lines for company, lines in SAID.items() if company in asked)
    return chat(json.dumps({"highlights": said}, ensure_ascii=False))


def highlights_cli(tmp_path, models):
    """``xladdin highlights`` on a two-row pool (five points) against a real HTTP engine listing ``models``."""
    import csv
    import os

    import openpyxl
    from conftest import Server
    from kit import run_cli

    pool = tmp_path / "pool.csv"
    with pool.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["代码", "名称", "财报摘要"], ["300750", "宁德时代", SOURCE],
                                 ["000001", "样本公司", SOURCE]])
    server = Server({"/v1/models": models, "/v1/chat/completions": answer})
    try:
        env = {**os.environ, "XLADDIN_ENGINE_URL": server.url, "XLADDIN_CACHE_DIR": str(tmp_path / "c")}
        r = run_cli("highlights", pool, "-o", tmp_path / "h.xlsx", "--points", "5", "--no-progress", env=env)
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    wb = openpyxl.load_workbook(tmp_path / "h.xlsx")
    rows = list(wb["Results"].iter_rows(values_only=True))
    return [dict(zip(rows[0], row, strict=True)) for row in rows[1:]], wb, r


def test_a_rank_said_of_another_item_and_a_phrase_said_again_are_dropped_with_why(tmp_path):
    from conftest import vllm_models

    (rank, repeat), wb, _ = highlights_cli(tmp_path, vllm_models("Qwen/Qwen3-8B"))
    # the rank of 储能电池 said of 动力电池: dropped; said of 储能电池 (五 for 5, 位居 beside), it stands
    assert rank["业绩亮点 highlights"] == ("1. 营收4009.17亿元，同比增长22.01%\n"
                                          "2. 宁德时代储能电池出货量连续五年位居全球第一")
    assert (rank["采用 kept"], rank["未核实删去 dropped"]) == (2, 1)
    assert rank["说明 notes"] == ("未核实，未采用「动力电池使用量连续5年全球第一」"
                                 "(原文未就「动力电池使用量」说连续5年全球第一)")
    # a phrase said thrice in a line, or a third time by the lines kept before: dropped, the phrase named
    assert repeat["业绩亮点 highlights"] == ("1. 营收4009.17亿元，公司实务实力强\n"
                                            "2. 储能电池出货量全球第一，公司实务实力领先")
    assert (repeat["采用 kept"], repeat["未核实删去 dropped"]) == (2, 2)
    assert repeat["说明 notes"] == ("重复，未采用「公司实务实力，公司实务实力，公司实务实力突出」(「公司实务」)；"
                                   "重复，未采用「海外客户拓展顺利，公司实务实力雄厚」(「公司实务实力」)")
    run = dict(wb["Run"].values)
    assert (run["highlights_kept"], run["highlights_dropped"]) == (4, 3)
    assert wb["Results"]["A1"].comment is None  # a Qwen: no starter model's note


def test_a_highlights_workbook_says_the_starter_model_a_server_serves_wrote_it(tmp_path):
    """A CPU server (``python -m xladdin.server.cpu_server``) serving the starter model by default lists it
    by its file: the workbook says so where its highlights are read (the header's note, a red tab)."""
    listed = {"object": "list", "data": [{"id": "SmolLM2-135M-Instruct.Q4_1@747cb1f01955", "object": "model",
                                          "meta": {"n_params": 134515008, "n_ctx_train": 8192}}]}
    _, wb, r = highlights_cli(tmp_path, (200, "application/json", json.dumps(listed).encode()))
    results = wb["Results"]
    assert "starter model SmolLM2" in results["A1"].comment.text
    assert results.sheet_properties.tabColor.rgb.endswith("C00000")
    assert wb["Summary"]["A1"].value.startswith("starter model SmolLM2")
    assert "starter model" in r.stdout + r.stderr  # and on the screen


NOTE = ("公司储能电池出货量连续5年全球第一，动力电池装机量排名第二。公司光伏逆变器销量位居行业前三；"
        "2023年公司首次实现海外营收过百亿元。前三季度营收增长20%。")


@pytest.mark.parametrize("highlight, unstated", [
    ("储能电池出货量连续五年全球第一", []),  # 五 is 5
    ("储能电池连续5年第一", []),  # fewer words than the source's: its claims and item are there
    ("储能电池全球第一", []),
    ("储能电池出货量连续6年全球第一", ["原文未就「储能电池出货量」说连续6年全球第一"]),  # another count
    ("储能电池出货量连续5年国内第一", ["原文未就「储能电池出货量」说连续5年国内第一"]),  # another scope
    ("动力电池连续5年全球第一", ["原文未就「动力电池」说连续5年全球第一"]),  # another item's rank
    ("动力电池装机量排名第二", []),
    ("动力电池装机量排名第一", ["原文未就「动力电池装机量」说排名第一"]),
    ("储能电池排名第二", ["原文未就「储能电池」说排名第二"]),  # said in the sentence, of another item
    ("光伏逆变器销量位居行业前三", []),
    ("光伏逆变器连续三年位居行业前三", ["原文未就「光伏逆变器」说连续三年位居行业前三"]),
    ("公司首次实现海外营收过百亿元", []),
    ("前三季度营收增长20%", []),  # a period, no rank
    ("第一季度营收增长20%", []),
])
def test_a_rank_or_a_streak_is_checked_against_the_source_by_hand(highlight, unstated):
    from xladdin.tasks.highlights import unstated_claims

    assert unstated_claims(highlight, NOTE) == unstated


@pytest.mark.parametrize("lines, repeat", [
    (["2019年1Q2019年2Q2019年2Q2019年2Q"], "2019"),  # said thrice in a line
    (["营收同比增长18%，归母净利润同比增长19%，扣非归母净利润同比增长20%"], None),  # figures' words: no repeat
    (["员工持股计划落地，员工持股计划覆盖核心员工"], None),  # twice is no repeat
    (["公司实务实力强", "公司实务实力领先", "公司实务实力雄厚"], "公司实务实力"),  # a third time across lines
    (["2018年营业收入9.17亿元,同比增长16.33%", "2018年营业收入9.17亿元,同比增长7.5%"],
     "年营业收入亿元同比增长"),  # the same words, numbers aside, a second time (the starter model's)
])
def test_a_phrase_said_again_by_hand(lines, repeat):
    from xladdin.tasks.highlights import _say, repeated

    said: dict[str, int] = {}
    for line in lines[:-1]:
        assert repeated(line, said) is None
        _say(said, line)
    assert repeated(lines[-1], said) == repeat
