"""A workbook's cells as of a day (the ``as_of`` setting: ``XLADDIN_AS_OF`` or ``as_of`` in the config file):
``QWEN_SCREEN`` leaves out a report published after it and says so, as ``xladdin screen --as-of`` does,
through xlwings' own ``call_udf`` (Excel) and Calc's runtime."""

from __future__ import annotations

import os

import pytest
from kit import Caller, recalculates, wait_until
from test_user_paths import MISSING, windows_udfs  # noqa: F401  (the fixture)

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.sheet import functions
from xladdin.sheet.functions import CellRuntime
from xladdin.testing import ScriptedEngine, screen_answer

REPORT = "2021-04-23__600519__2020年年度报告.txt"
BODY = "贵州茅台2020年年度报告\n营业收入1,000.00亿元，同比增长10.00%。归属于上市公司股东的净利润500.00亿元。\n"
LEFT_OUT = f"未用 {REPORT}: 公告日 2021-04-23 (文件名) 晚于 as-of 2021-03-31"  # the CLI's words
BOUND_S = 60.0


def asked_with_report(engine: ScriptedEngine) -> list[bool]:
    """For each request the engine got: whether the report's text was in it."""
    return ["1,000.00亿元" in "".join(m["content"] for m in call) for call in engine.calls]


def test_a_cell_leaves_out_a_report_published_after_the_workbook_s_as_of_day(windows_udfs, tmp_path,  # noqa: F811
                                                                              monkeypatch):
    call_udf, name, module = windows_udfs
    (tmp_path / REPORT).write_text(BODY, encoding="utf-8")  # beside the workbook, dated by its name
    config = tmp_path / "config.toml"
    config.write_text("as_of = 2021-03-31\n", encoding="utf-8")  # the config file's key (a TOML date)
    monkeypatch.setenv("XLADDIN_CONFIG", str(config))
    engine = ScriptedEngine(lambda m: screen_answer("业绩稳健"), delay=0.05)
    book = str(tmp_path / "pool.xlsx")
    row = ((600519.0, "贵州茅台", "白酒", 25.0, 30.0, None, REPORT, None, None, None),)

    def cell() -> dict:
        """The cell as Excel shows it once its answers are in (Excel recalculates a waiting cell)."""
        recalculated = []
        runtime = module.runtime()
        runtime.told = recalculates(recalculated.append)
        done = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, {"address": "$L$2", "book": book})
        for _ in range(3):  # its report read for its dates, then its answer: each a recalculation
            if done[0][0] != functions.PENDING:
                break
            wait_until(lambda: recalculated, BOUND_S, message="the cell was never recalculated")
            recalculated.clear()
            done = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None,
                            {"address": "$L$2", "book": book})
        again = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, {"address": "$L$2", "book": book})
        assert again == done  # recalculated from memory: the same, its notes included
        return dict(zip(functions.SPILL_FIELDS, done[0], strict=True))

    def started() -> None:
        """Excel's UDF server (re)started: a runtime reading the settings as they are now, the one cache."""
        module.set_runtime(CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0)))

    started()
    out = cell()  # as of 2021-03-31: the report of 2021-04-23 was not public
    assert out["code"] == "600519.SH" and out["risk_level"] in ("低", "中", "高"), out
    assert LEFT_OUT in out["notes"] and "公告日未知" not in out["flags"] and "数据缺失" in out["flags"]
    assert (out["period"], out["published"]) == ("", "") and REPORT not in out["read"]
    assert asked_with_report(engine) == [False]  # the model was asked on the row's fields alone

    # the setting changed (the environment beats the file): the report is public by then and used
    monkeypatch.setenv("XLADDIN_AS_OF", "20210501")
    started()
    out = cell()
    assert (out["period"], out["published"]) == ("2020年度", "2021-04-23") and REPORT in out["read"]
    assert "未用" not in out["notes"] and "报告期 2020年度 (文件名); 公告日 2021-04-23 (文件名)" in out["notes"]
    assert "公告日未知" not in out["flags"]
    assert asked_with_report(engine) == [False, True]

    # and back to the file's day: left out again, from the cache — never the answer read with the report
    monkeypatch.delenv("XLADDIN_AS_OF")
    started()
    out = cell()
    assert LEFT_OUT in out["notes"] and (out["period"], out["published"]) == ("", "") and REPORT not in out["read"]
    assert len(engine.calls) == 2


def test_a_report_dated_by_its_text_alone_is_read_off_the_calling_thread_and_left_out(windows_udfs, tmp_path,  # noqa: F811
                                                                                         monkeypatch):
    from xladdin.reading import documents

    call_udf, name, module = windows_udfs
    (tmp_path / "600519_年报.txt").write_text(BODY + "董事会批准报送日期：2021年4月23日\n", encoding="utf-8")

    def opened_here(*args):
        raise AssertionError(f"a report file was opened on the calling side: {args}")

    monkeypatch.setattr(documents, "read_document", opened_here)  # the reader's processes read it
    monkeypatch.setattr(documents, "_read", opened_here)
    monkeypatch.setenv("XLADDIN_AS_OF", "2021-03-31")
    engine = ScriptedEngine(lambda m: screen_answer("业绩稳健"))
    module.set_runtime(CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0)))
    row = ((600519.0, "贵州茅台", "白酒", 25.0, 30.0, None, "600519_年报.txt", None, None, None),)
    done = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None,
                    {"address": "$L$2", "book": str(tmp_path / "pool.xlsx")})
    out = dict(zip(functions.SPILL_FIELDS, done[0], strict=True))
    assert ("未用 600519_年报.txt: 公告日 2021-04-30 (法定披露期限; 正文: 董事会批准报送日期 2021-04-23 只是下限) 晚于 "
            "as-of 2021-03-31") in out["notes"]
    assert asked_with_report(engine) == [False]


def test_an_excel_cell_as_of_a_day_never_waits_for_its_report_to_be_read(windows_udfs, tmp_path,  # noqa: F811
                                                                           monkeypatch):
    """In Excel (a cell whose door is told: its ``told`` recalculates it) the report a row names is read for
    its dates off Excel's thread: the first call is pending at once, the file's read begun; once it is read
    the cell is recalculated and dated as the CLI dates it."""
    from kit import recalculates, wait_until

    call_udf, name, module = windows_udfs
    (tmp_path / "600519_年报.txt").write_text(BODY + "董事会批准报送日期：2021年4月23日\n", encoding="utf-8")
    monkeypatch.setenv("XLADDIN_AS_OF", "2021-03-31")
    engine = ScriptedEngine(lambda m: screen_answer("业绩稳健"))
    recalculated: list = []
    runtime = CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0),
                          told=recalculates(recalculated.append))
    module.set_runtime(runtime)
    reads: list[str] = []
    read_now = runtime.batcher.reader.read_now
    monkeypatch.setattr(runtime.batcher.reader, "read_now",
                        lambda path: reads.append(os.path.basename(path)) or read_now(path))
    row = ((600519.0, "贵州茅台", "白酒", 25.0, 30.0, None, "600519_年报.txt", None, None, None),)
    caller = {"address": "$L$2", "book": str(tmp_path / "pool.xlsx")}
    first = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, caller)
    assert first[0][0] == functions.PENDING and reads == []  # nothing waited for on Excel's thread
    wait_until(lambda: recalculated, 60, message="the cell was never recalculated once its report was read")
    recalculated.clear()
    done = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, caller)
    if done[0][0] == functions.PENDING:  # dated now: its request (without the later report) is out
        wait_until(lambda: recalculated, 60, message="the cell was never recalculated with its answer")
        done = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, caller)
    assert set(reads) == {"600519_年报.txt"}  # dated from its text once it was in memory: no wait
    out = dict(zip(functions.SPILL_FIELDS, done[0], strict=True))
    assert "未用 600519_年报.txt: 公告日 2021-04-30" in out["notes"], out
    assert asked_with_report(engine) == [False]


def test_the_refresh_macro_fills_the_cache_as_the_cells_will_ask_as_of_the_day(tmp_path, monkeypatch):
    from xladdin.excel import udfs
    from xladdin.excel.macros import POOL_COLUMNS, refresh_values

    (tmp_path / REPORT).write_text(BODY, encoding="utf-8")
    monkeypatch.setenv("XLADDIN_AS_OF", "2021-03-31")
    engine = ScriptedEngine(lambda m: screen_answer("业绩稳健"))
    runtime = CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0))
    udfs.set_runtime(runtime)
    try:
        pool_row = [600519, "贵州茅台", "白酒", 25.0, 30.0, None, REPORT, None, None, None]
        counts = refresh_values([list(POOL_COLUMNS), pool_row], runtime=runtime, folder=tmp_path)
        assert counts["rows"] == 1 and counts["errors"] == 0 and asked_with_report(engine) == [False]
        caller = Caller("$L$2", book=tmp_path / "pool.xlsx")
        cell = udfs.QWEN_SCREEN([pool_row], False, None, caller)  # the Pool sheet's formula, in that workbook
        assert LEFT_OUT in dict(zip(functions.SPILL_FIELDS, cell[0], strict=True))["notes"]
        assert len(engine.calls) == 1  # the formula's request was the one the macro made
    finally:
        udfs.set_runtime(None)


def test_a_bad_as_of_setting_is_a_cell_error_naming_it(windows_udfs, monkeypatch):  # noqa: F811
    call_udf, name, module = windows_udfs
    monkeypatch.setenv("XLADDIN_AS_OF", "2021-13-01")
    module.set_runtime(CellRuntime())
    row = ((600519.0, "贵州茅台", "白酒", 25.0, 30.0, None, "营收1505亿元", None, None, None),)
    shown = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, {"address": "$L$2"})
    assert shown[0][0] == ("#QWEN! setting as_of: Value error, '2021-13-01' is not a date (write it as 2021-03-31) "
                           "(XLADDIN_AS_OF)")


class Listener:
    def __init__(self):
        self.values = []

    def modified(self, event):
        self.values.append(event)


def test_calc_cells_as_of_a_day_refuse_a_row_published_after_it_and_leave_out_a_later_report(tmp_path, monkeypatch):
    """Calc's runtime (no LibreOffice): a table with its header — a row whose 公告日期 is after the day is
    refused as the CLI refuses it, a report file published after it is left out, an undated row flagged."""
    from xladdin.calc.runtime import CalcFunctions, Waiting

    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / REPORT).write_text(BODY, encoding="utf-8")
    monkeypatch.setenv("XLADDIN_AS_OF", "2021-03-31")
    monkeypatch.setenv("XLADDIN_REPORT_DIRS", str(reports))
    posted = []
    engine = ScriptedEngine(lambda m: screen_answer("经营稳健"), delay=0.05)
    f = CalcFunctions(lambda: Waiting(lambda source, value: value), posted.append,
                      batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0))
    table = (("代码", "名称", "行业", "市盈率TTM", "ROE", "公告日期", "报告期", "报告文件"),
             ("600519", "贵州茅台", "白酒", 25.0, 30.0, "", "", str(reports / REPORT)),
             ("000858", "五粮液", "白酒", 30.0, 25.0, "2021-04-28", "2020年报", ""),
             ("000001", "平安银行", "银行", 5.0, 10.0, 20210320.0, "20201231", ""))
    try:
        first = f.call("QWEN_SCREEN", (table, 1.0, None))
        cell = Listener()
        first.addResultListener(cell)
        for _ in range(3):  # its report read for its dates, then its answers: each settled on the main thread
            wait_until(lambda: posted, BOUND_S, message="the call never settled")
            posted.pop()()  # LibreOffice's main thread settles it
            if cell.values and functions.PENDING not in str(cell.values[-1]):
                break
        header, left, refused, public = cell.values[-1]
        assert header == functions.spill_header()
        left, public = dict(zip(functions.SPILL_FIELDS, left, strict=True)), dict(zip(functions.SPILL_FIELDS, public,
                                                                                   strict=True))
        assert LEFT_OUT in left["notes"] and "公告日未知" not in left["flags"] and left["published"] == ""
        assert refused[0] == ("#QWEN! published 公告日期 2021-04-28 is after the as-of day 2021-03-31: this row's "
                              "figures were not public then (refused)") and set(refused[1:]) == {""}
        assert (public["period"], public["published"]) == ("2020年度", "2021-03-20") and public["code"] == "000001.SZ"
        assert "公告日 2021-03-20 (列 公告日期)" in public["notes"] and "公告日未知" not in public["flags"]
        assert len(engine.calls) == 2 and asked_with_report(engine) == [False, False]  # the refused row asked nothing
    finally:
        f.close()


def test_the_cell_service_s_cells_as_of_the_day_leave_out_a_later_report(tmp_path, monkeypatch):
    """The cell service (Office add-in, WPS, browser grid) over its real HTTPS: the same cell, the same words."""
    pytest.importorskip("aiohttp")
    pytest.importorskip("cryptography")
    from test_cells import Client, start

    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / REPORT).write_text(BODY, encoding="utf-8")
    monkeypatch.setenv("XLADDIN_AS_OF", "2021-03-31")
    monkeypatch.setenv("XLADDIN_REPORT_DIRS", str(reports))
    engine = ScriptedEngine(lambda m: screen_answer("业绩稳健"), delay=0.05)
    runtime = CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0))
    running, cert = start(runtime, tmp_path)
    try:
        client = Client(running.url, cert.ca)
        one_row = [[600519, "贵州茅台", "白酒", 25.0, 30.0, None, str(reports / REPORT)]]
        batch = [{"fn": "QWEN_SCREEN", "args": [one_row]}]
        first = client.calls(batch)
        value = first[0]["value"] if first[0]["state"] == "done" else client.settle_all(first)[first[0]["id"]]
        out = dict(zip(functions.SPILL_FIELDS, value[0], strict=True))
        assert LEFT_OUT in out["notes"] and "公告日未知" not in out["flags"] and asked_with_report(engine) == [False]
    finally:
        running.stop()
        runtime.close()


@pytest.mark.parametrize("text", ["as_of = 2021-03-31", 'as_of = "20210331"'])
def test_the_config_file_s_as_of_is_read_as_a_day(tmp_path, monkeypatch, text):
    import datetime as dt

    from xladdin.settings import Settings

    config = tmp_path / "config.toml"
    config.write_text(text + "\n", encoding="utf-8")
    monkeypatch.setenv("XLADDIN_CONFIG", str(config))
    assert Settings.load().as_of == dt.date(2021, 3, 31)
