"""The pandas front door, ``xladdin.screen(df)``."""

import json
import time

import pandas as pd
import pytest
from conftest import run_python

import xladdin
from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.testing import ScriptedEngine, screen_answer


def test_screen_adds_verdict_columns_and_keeps_the_frame(tmp_path):
    df = pd.DataFrame(
        {"代码": ["600519", "000001", "600036"], "名称": ["贵州茅台", "平安银行", "招商银行"],
         "ROE(%)": [34.19, 11.38, "N/A x"], "市盈率TTM": [25.6, 4.1, 6.0],
         "净利润(万元)": [7473400, 4645500, None],
         "财报摘要": ["归母净利润747.34亿元。", "归母净利润464.55亿元。", None]},
        index=["a", "b", "c"],
    )
    engine = ScriptedEngine(lambda _: screen_answer("稳健"))
    with Batcher(engine, Cache(tmp_path / "c")) as b:
        out = xladdin.screen(df, batcher=b, progress=False)
    assert list(out.index) == ["a", "b", "c"] and list(out.columns[:6]) == list(df.columns)
    assert list(out["风险等级 risk"][:2]) == ["低", "中"] and out.loc["a", "评分 score"] == 100
    assert out.loc["a", "净利润(亿元) net profit"] == pytest.approx(747.34)
    assert "数据存疑" not in out.loc["a", "标记 flags"]  # 7,473,400 万元 = 747.34 亿元, as the text says
    assert out.loc["a", "出处 evidence"] == "净利润「归母净利润747.34亿元」"
    assert out.loc["c", "错误 error"] == "#QWEN! roe is not a number: 'N/A x'"
    assert pd.isna(out.loc["a", "错误 error"]) and df.shape == (3, 6)  # the input frame is untouched
    with Batcher(engine, Cache(tmp_path / "c")) as later:  # the next session: from the disk
        again = xladdin.screen(out.iloc[:, :6], batcher=later, progress=False)
    assert list(again["缓存命中 cached"][:2]) == [True, True] and len(engine.calls) == 2


@pytest.mark.slow
def test_screen_in_a_plain_python_session(tiny_model_path, tmp_path):
    code = (
        "import pandas as pd, xladdin\n"
        "df = pd.DataFrame({'代码': ['600519'], '名称': ['贵州茅台'], 'ROE': [34.19], '市盈率TTM': [25.6],\n"
        "                   '财报摘要': ['2023年营业收入1505.60亿元，归母净利润747.34亿元。']})\n"
        "out = xladdin.screen(df)\n"
        "print(out.iloc[0][['风险等级 risk', '营收(亿元) revenue']].to_json(force_ascii=False))\n"
    )
    r = run_python(code, tiny_model_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"风险等级 risk": "低", "营收(亿元) revenue": 1505.6}
    assert "1/1" in r.stderr  # the progress bar


def test_screen_reads_a_report_file_column(tmp_path):
    from test_documents import PAGE_1, PAGE_2, make_pdf

    pdf = make_pdf(tmp_path / "688001.pdf", [PAGE_1, PAGE_2])
    df = pd.DataFrame({"代码": ["688001", "600000"], "名称": ["华兴源创", "浦发银行"],
                       "报告文件": [str(pdf), str(tmp_path / "gone.pdf")]})
    with Batcher(ScriptedEngine(lambda _: screen_answer("稳健")), Cache(tmp_path / "c")) as b:
        out = xladdin.screen(df, batcher=b, progress=False, reports=tmp_path)  # the reports' folder: allowed
    assert out.loc[0, "净利润(亿元) net profit"] == pytest.approx(-0.31204) and out.loc[0, "风险等级 risk"] == "高"
    assert "(第1页)" in out.loc[0, "出处 evidence"] and "688001.pdf" in out.loc[0, "阅读范围 read"]
    assert "gone.pdf" in out.loc[1, "错误 error"]


def test_a_frame_screened_in_a_users_process_leaves_its_garbage_collector_as_it_was(tmp_path):
    """While a table is asked, the youngest generation is collected every ``collector.YOUNG`` objects, not
    Python's 700 (a collection every few rows); the user's own setting is back once ``screen`` returns,
    and a collector the user turned off stays off."""
    import gc

    from xladdin import collector

    seen = []

    def respond(_):
        seen.append(gc.get_threshold()[0])
        return screen_answer("稳健")

    df = pd.DataFrame({"代码": ["600519", "000001"], "名称": ["贵州茅台", "平安银行"], "ROE(%)": [34.19, 11.38],
                       "市盈率TTM": [25.6, 4.1], "财报摘要": ["归母净利润747.34亿元。", "归母净利润464.55亿元。"]})
    before = gc.get_threshold()
    try:
        for users in ((700, 10, 10), (0, 10, 10)):
            gc.set_threshold(*users)
            seen.clear()
            with Batcher(ScriptedEngine(respond), Cache(tmp_path / f"c{users[0]}")) as b:
                out = xladdin.screen(df, batcher=b, progress=False)
            assert list(out["风险等级 risk"]) == ["低", "中"]
            assert seen == [collector.YOUNG if users[0] else 0] * 2 and gc.get_threshold() == users
    finally:
        gc.set_threshold(*before)


def test_a_large_frame_is_asked_no_further_ahead_of_the_engine_than_its_window_and_rows_ahead(tmp_path):
    """A table makes its requests as the engine takes them: with the server holding its answers, no more
    than the engine's window and ``ROWS_AHEAD`` are made (prepared, keyed, looked up in the cache and
    queued); the rest follow as answers come, and every row gets its verdict."""
    import threading

    from conftest import tiny_settings
    from kit import wait_until
    from test_user_paths import _answering_server

    from xladdin.core.resolver import ROWS_AHEAD

    go = threading.Event()
    window, n = 2, ROWS_AHEAD + 60
    server = _answering_server(screen_answer("稳健"), hold=go)
    df = pd.DataFrame({"代码": [f"{600000 + i}" for i in range(n)], "名称": [f"公司{i}" for i in range(n)],
                       "ROE(%)": [10.0] * n, "市盈率TTM": [20.0] * n})
    out = {}
    b = Batcher.from_settings(tiny_settings(tmp_path, engine_url=server.url, max_parallel=window))
    run = threading.Thread(target=lambda: out.setdefault("df", xladdin.screen(df, batcher=b, progress=False)))
    run.start()
    try:
        wait_until(lambda: b.stats.submitted >= window + ROWS_AHEAD, 60, message="the rows were not asked")
        time.sleep(1.0)  # time to ask on, were there no bound
        assert b.stats.submitted == window + ROWS_AHEAD < n
    finally:
        go.set()
        run.join(60)
        b.close()
        server.close()
    assert len(out["df"]) == n and out["df"]["错误 error"].isna().all() and b.stats.engine_requests == n
