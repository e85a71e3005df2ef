"""The UDFs as plain calls (xlwings decorators are no-ops off Windows), with the
values Excel's converters pass, through the real embedded engine."""

import concurrent.futures
import threading

import numpy as np
import pytest
from conftest import Server, tiny_settings, vllm_models
from kit import Caller, recalculates

from xladdin.core.batcher import Batcher
from xladdin.excel import udfs
from xladdin.excel.macros import refresh_values
from xladdin.sheet import functions
from xladdin.sheet.functions import CellRuntime
from xladdin.tasks.rules import Rules

pytestmark = pytest.mark.slow
WIDTH = len(functions.SPILL_FIELDS)
HEADER = ["代码", "名称", "行业", "市盈率TTM", "ROE", "每股收益", "财报摘要"]


def row(i, roe=20.0, pe=30.0):
    return [600000.0 + i, f"公司{i}", "行业", pe, roe, 1.5, f"2023年营业收入{100 + i}亿元，同比增长{i}%。"]


# How long a test waits for an event (answers arriving, cells recalculated): generous, so a loaded
# machine only makes it slower; the wait ends as soon as the event happens.
PATIENCE = 900.0


class Recalculated(list):
    """The runtime's ``rewrite`` callback: records each cell Excel is asked to recalculate; ``wait(n)``
    returns once ``n`` have been (or after ``PATIENCE``)."""

    def __init__(self):
        super().__init__()
        self._cond = threading.Condition()

    def __call__(self, caller):
        with self._cond:
            self.append(caller)
            self._cond.notify_all()

    def wait(self, n):
        with self._cond:
            self._cond.wait_for(lambda: len(self) >= n, timeout=PATIENCE)
        return self


@pytest.fixture
def rt(tiny_engine, tmp_path):
    batcher = Batcher.from_settings(tiny_settings(tmp_path), engine=tiny_engine)
    runtime = CellRuntime(batcher=batcher)
    udfs.set_runtime(runtime)
    yield runtime
    udfs.set_runtime(None)


def test_one_row_spills_a_verdict_then_hits_the_cache(rt):
    out = udfs.QWEN_SCREEN([row(1, roe=15, pe=30)])
    assert len(out) == 1 and len(out[0]) == WIDTH
    values = dict(zip(functions.SPILL_FIELDS, out[0], strict=True))
    assert values["code"] == "600001.SH" and values["risk_level"] == "低" and values["score"] == 94
    requests = rt.batcher.snapshot()["engine_requests"]
    again = udfs.QWEN_SCREEN(np.array([row(1, roe=15, pe=30)], dtype=object))
    assert again == out and rt.batcher.snapshot()["engine_requests"] == requests


def test_table_with_header_is_one_call(rt):
    table = [HEADER] + [row(i) for i in range(5)] + [[None] * 7] + [row(9, roe="N/A x")]
    out = udfs.QWEN_SCREEN(table, True)
    assert out[0] == functions.spill_header() and len(out) == 8
    assert [r[0] for r in out[1:6]] == [f"60000{i}.SH" for i in range(5)]
    assert out[6] == [""] * WIDTH  # a blank row stays blank
    assert out[7][0] == "#QWEN! roe is not a number: 'N/A x'" and out[7][1:] == [""] * (WIDTH - 1)


def test_bad_input_and_bad_rules_are_error_values(rt):
    assert udfs.QWEN_SCREEN([["abc", "x"]])[0][0].startswith("#QWEN! code is not an A-share code")
    out = udfs.QWEN_SCREEN([row(1)], False, [["pe_limt", 30]])
    assert out[0][0].startswith("#QWEN! rules unknown key 'pe_limt'") and len(out[0]) == WIDTH
    assert udfs.QWEN_SCREEN([list(range(12))])[0][0].startswith("#QWEN! range has 12 columns")


def test_rules_range_changes_level_and_score(rt):
    strict = functions.rules_rows(Rules(roe_low_risk_from=25, pe_limit=20))
    default = dict(zip(functions.SPILL_FIELDS, udfs.QWEN_SCREEN([row(2)])[0], strict=True))
    custom = dict(zip(functions.SPILL_FIELDS, udfs.QWEN_SCREEN([row(2)], False, [["key", "value", ""], *strict])[0],
                      strict=True))
    assert (default["risk_level"], custom["risk_level"]) == ("低", "中")


def test_pending_cells_get_a_placeholder_and_are_recalculated(rt):
    recalculated = Recalculated()
    rt.told = recalculates(recalculated)
    callers = [Caller(f"$K${i}") for i in range(2, 12)]
    first = [udfs.QWEN_SCREEN([row(100 + i)], False, None, c) for i, c in enumerate(callers)]
    assert all(f[0][0] == functions.PENDING and len(f[0]) == WIDTH for f in first)
    recalculated.wait(len(callers))
    assert sorted(c.address for c in recalculated) == sorted(c.address for c in callers)
    # Excel calls the cells again: all cache hits, no placeholder
    again = [udfs.QWEN_SCREEN([row(100 + i)], False, None, c) for i, c in enumerate(callers)]
    assert all(a[0][0] == f"{600100 + i}.SH" for i, a in enumerate(again))
    assert rt.pending_cells == 0


def test_200_concurrent_row_calls_reach_the_engine_batched(rt):
    """200 cells called from Excel's threads at once: each gets its placeholder at once and is recalculated
    when its answer arrives (waited for as events, however slow the machine); then every cell's value."""
    rows = [row(1000 + i, roe=i % 30, pe=5 + i) for i in range(200)]
    callers = [Caller(f"$K${i}") for i in range(2, 202)]
    recalculated = Recalculated()
    rt.told = recalculates(recalculated)
    with concurrent.futures.ThreadPoolExecutor(32) as pool:  # Excel's threads call one cell each
        first = list(pool.map(lambda r, c: udfs.QWEN_SCREEN([r], False, None, c), rows, callers))
    assert all(f[0][0] == functions.PENDING for f in first)
    assert len(recalculated.wait(len(callers))) == len(callers), f"{len(recalculated)} of 200 recalculated"
    with concurrent.futures.ThreadPoolExecutor(32) as pool:  # Excel recalculates them: answers from memory
        results = list(pool.map(lambda r, c: udfs.QWEN_SCREEN([r], False, None, c), rows, callers))
    snap = rt.batcher.snapshot()
    assert all(r[0][0].endswith(".SH") for r in results), [r[0][0] for r in results if not r[0][0].endswith(".SH")]
    assert snap["engine_requests"] == 200
    # one queue fed at the engine's full parallelism: never more than its slots at once,
    # and far fewer collection waves than one per 32-thread round
    assert snap["peak_in_engine"] == rt.batcher.window.limit
    assert snap["waves"] <= 200 // 32
    before = snap["engine_requests"]
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        again = list(pool.map(lambda r: udfs.QWEN_SCREEN([r]), rows))
    assert again == results and rt.batcher.snapshot()["engine_requests"] == before


def test_ask_extract_classify_status(rt):
    answer = udfs.QWEN("用一句话概括", [["营业收入100亿元"], [None]])
    assert isinstance(answer, str) and answer and not answer.startswith("#QWEN!")
    value = udfs.QWEN_EXTRACT("归母净利润12.5亿元", "净利润")
    # the tiny model's figure is taken only when the text holds it
    assert value == 12.5 or value.startswith(("#QWEN! 文本中没有", "#QWEN! 模型给出的"))
    label = udfs.QWEN_CLASSIFY("营收大增", ["利好", "利空", "中性"])
    assert label in ("利好", "利空", "中性")
    assert udfs.QWEN_CLASSIFY("x", "利好,利好") == "#QWEN! labels need 2 to 50 distinct labels, got 1"
    assert udfs.QWEN_EXTRACT("x", "净利润", "美元").startswith("#QWEN! unit '美元' is not one of")
    assert udfs.QWEN("") == "#QWEN! prompt is empty"
    status = dict(udfs.QWEN_STATUS())
    assert status["model"].startswith("tiny-qwen3@") and status["cache entries"] >= 3


def test_refresh_macro_fills_the_cache_for_the_formulas(rt):
    table = [HEADER] + [row(500 + i) for i in range(6)]
    progress = []
    counts = refresh_values(table, None, progress.append, runtime=rt)
    assert counts == {"rows": 6, "done": 6, "cached": 0, "errors": 0} and progress[-1].startswith("xladdin: 6/6")
    requests = rt.batcher.snapshot()["engine_requests"]
    out = [udfs.QWEN_SCREEN([row(500 + i)], False, None, Caller("$K$2")) for i in range(6)]
    assert all(o[0][0] == f"{600500 + i}.SH" for i, o in enumerate(out))  # no placeholder: cache hits
    assert rt.batcher.snapshot()["engine_requests"] == requests


def test_engine_offline_is_a_cell_value(tmp_path):
    settings = tiny_settings(tmp_path, engine_url="http://127.0.0.1:9/v1", served_model="m", timeout=2, retries=0)
    udfs.set_runtime(CellRuntime(settings))
    try:
        out = udfs.QWEN_SCREEN([row(1)])
        assert out[0][0] == "#QWEN! engine offline (http://127.0.0.1:9/v1)" and len(out[0]) == WIDTH
        assert dict(udfs.QWEN_STATUS())["last error"] == "engine offline (http://127.0.0.1:9/v1)"
    finally:
        udfs.set_runtime(None)


class FakeBook:
    """The part of an xlwings Book that ``udfs.book_rules`` reads."""

    def __init__(self, name, rules_values):
        self.name = name
        rules = type("Sheet", (), {"name": "Rules", "range": lambda self, a: type("R", (), {"value": rules_values})()})
        self.sheets = type("Sheets", (), {"__iter__": lambda s: iter([rules()]), "__getitem__": lambda s, k: rules()})()


def test_rules_sheet_of_the_calling_book_is_read_without_an_argument(rt):
    caller = Caller("$L$2")
    caller.sheet.book = FakeBook("strict.xlsx", [["roe_low_risk_from", 25], ["pe_limit", 20], [None, None]])
    out = dict(zip(functions.SPILL_FIELDS, udfs.QWEN_SCREEN([row(3)], False, None, caller)[0], strict=True))
    assert out["risk_level"] == "中"  # ROE 20 < 25 under the book's rules; 低 under the defaults
    assert dict(zip(functions.SPILL_FIELDS, udfs.QWEN_SCREEN([row(3)])[0], strict=True))["risk_level"] == "低"


def test_a_failed_pending_cell_shows_its_error_instead_of_asking_again(tmp_path):
    # a real server on 127.0.0.1 that lists its model and then fails every completion
    server = Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"),
                     "/v1/chat/completions": (503, "application/json", b'{"error": {"message": "overloaded"}}')})
    settings = tiny_settings(tmp_path, engine_url=server.url, timeout=2, retries=0)
    recalculated = Recalculated()
    rt = CellRuntime(settings, told=recalculates(recalculated))
    udfs.set_runtime(rt)
    try:
        caller = Caller("$L$2")
        assert udfs.QWEN_SCREEN([row(1)], False, None, caller)[0][0] == functions.PENDING
        assert recalculated.wait(1) == [caller]
        requests = rt.batcher.snapshot()["engine_requests"]
        again = udfs.QWEN_SCREEN([row(1)], False, None, caller)  # Excel recalculates the cell
        assert again[0][0] == f"#QWEN! engine error 503 ({server.url}): overloaded"
        assert rt.batcher.snapshot()["engine_requests"] == requests and recalculated == [caller]  # no loop
        rt.error_ttl = 0  # later, a recalculation asks again
        assert udfs.QWEN_SCREEN([row(1)], False, None, caller)[0][0] == functions.PENDING
    finally:
        udfs.set_runtime(None)
        server.close()


def test_recalculating_an_open_workbook_is_served_from_memory(rt):
    r = row(7)
    first = udfs.QWEN_SCREEN([r])  # asks the engine
    assert udfs.QWEN_SCREEN([r]) == first  # a disk-cache hit, remembered
    hits = rt.batcher.snapshot()["cache_hits"]
    assert udfs.QWEN_SCREEN([r]) == first
    assert rt.batcher.snapshot()["cache_hits"] == hits  # neither the disk nor the engine
    stricter = udfs.QWEN_SCREEN([r], False, [["roe_low_risk_from", 30]])  # other rules: not the remembered row
    assert rt.batcher.snapshot()["cache_hits"] == hits + 1 and stricter[0][2] == "中" and first[0][2] == "低"


def test_a_cell_whose_answer_fails_spills_the_rules_verdict_and_is_not_asked_again(tiny_engine, tmp_path):
    """A real server whose answers never fit the schema: the cell gets its placeholder, is
    recalculated once, then spills the rules' verdict flagged 模型未作答; recalculating the
    sheet does not send the request again."""
    settings = tiny_settings(tmp_path, engine_url=tiny_engine.address, structured_output=False, max_tokens=64)
    recalculated = Recalculated()
    runtime = CellRuntime(batcher=Batcher.from_settings(settings), told=recalculates(recalculated))
    udfs.set_runtime(runtime)
    try:
        caller = Caller("$K$2")
        assert udfs.QWEN_SCREEN([row(7, roe=3.0)], False, None, caller)[0][0] == functions.PENDING
        assert [c.address for c in recalculated.wait(1)] == ["$K$2"]
        asked = runtime.batcher.snapshot()["engine_requests"]
        assert asked == 2  # asked, then asked again with the error
        for _ in range(3):  # Excel recalculates the cell, then the whole sheet, again and again
            values = dict(zip(functions.SPILL_FIELDS, udfs.QWEN_SCREEN([row(7, roe=3.0)], False, None, caller)[0],
                              strict=True))
            assert values["risk_level"] == "高" and values["flags"] == "模型未作答"
        assert runtime.batcher.snapshot()["engine_requests"] == asked and len(recalculated) == 1
    finally:
        udfs.set_runtime(None)
        runtime.batcher.close()


def test_a_number_the_model_made_up_is_no_value_and_an_answer_s_is_marked(tmp_path):
    """``QWEN_EXTRACT`` shows a number only when its text holds it (in any unit, or rounded to the digits
    the model wrote); ``QWEN`` marks each number of its answer that no text given to it holds (issue 46)."""
    import json

    from xladdin.core.cache import Cache
    from xladdin.testing import ScriptedEngine

    said = {}

    def respond(messages):
        return json.dumps(said["answer"], ensure_ascii=False)

    with Batcher(ScriptedEngine(respond), Cache(tmp_path / "cache")) as b:
        udfs.set_runtime(CellRuntime(tiny_settings(tmp_path), batcher=b))
        try:
            text = "公司实现营业收入2,023亿元，同比增长8.5%；归母净利润125,000万元。"
            said["answer"] = {"figure": "20.23亿元"}
            assert udfs.QWEN_EXTRACT(text, "营业收入") == "#QWEN! 模型给出的20.23亿元不在文本中, 未采用"
            said["answer"] = {"figure": "12.5亿元"}  # the text's 125,000万元 in another unit
            assert udfs.QWEN_EXTRACT(text, "归母净利润") == 12.5
            said["answer"] = {"figure": "2023亿元"}
            assert udfs.QWEN_EXTRACT(text, "营业收入", "万元") == 20_230_000
            said["answer"] = {"answer": "营收2023亿元，增长8.5%，净利润约13.6亿元；有3个原因"}
            assert udfs.QWEN("概括", [[text]]) == "营收2023亿元，增长8.5%，净利润约13.6亿元；有3个原因" \
                "（未见于所给文字的数字: 13.6亿元）"
            said["answer"] = {"answer": "增长8.5%"}
            assert udfs.QWEN("增长多少?", [[text]]) == "增长8.5%"
        finally:
            udfs.set_runtime(None)
