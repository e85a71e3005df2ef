import json
import threading

import pytest

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Resolver
from xladdin.errors import EngineError, InputError, OutputError
from xladdin.tasks import ClassifyTask, ScreenResult, ScreenTask
from xladdin.tasks.rules import Flag
from xladdin.tasks.screen import NO_ANSWER_REASON
from xladdin.testing import ScriptedEngine, screen_answer

TASK = ScreenTask()


def row(i, text="营收100亿元", **kw):
    return {"code": 600000 + i, "name": f"公司{i}", "roe": 10 + i % 10, "pe_ttm": 20, "report_text": text, **kw}


def name_of(messages):
    return json.loads(messages[1]["content"])["name"]


@pytest.fixture
def make(tmp_path):
    made = []

    def _make(respond=lambda m: screen_answer(), **kw):
        opts = {k: kw.pop(k) for k in ("window_ms",) if k in kw}  # max_parallel: the engine's own
        engine = ScriptedEngine(respond, **kw)
        b = Batcher(engine, Cache(tmp_path / f"cache{len(made)}"), **opts)
        made.append(b)
        return b, engine

    yield _make
    for b in made:
        b.close()


def test_results_in_order_and_second_pass_all_cached(make):
    b, engine = make()
    rows = [row(i) for i in range(12)]
    first = Resolver(b).map(TASK, rows)
    assert [r.code for r in first] == [f"{600000 + i}.SH" for i in range(12)]
    assert all(isinstance(r, ScreenResult) and not r.provenance.cached for r in first)
    assert len(engine.calls) == 12
    again = Resolver(b).map(TASK, rows)  # the same core: each request's fate, kept in its one table
    assert [a is f for a, f in zip(again, first, strict=True)] == [True] * 12 and len(engine.calls) == 12
    with Batcher(engine, Cache(b.cache.directory)) as later:  # the next process: every row from the disk
        second = Resolver(later).map(TASK, rows)
        assert all(r.provenance.cached for r in second) and len(engine.calls) == 12
        assert [r.model_dump(exclude={"provenance"}) for r in second] == [
            r.model_dump(exclude={"provenance"}) for r in first
        ]
        assert later.snapshot()["cache_hits"] == 12


def test_identical_requests_share_one_engine_call(make):
    b, engine = make(delay=0.05)
    futures = [b.submit(TASK, TASK.parse(row(1))) for _ in range(10)]
    results = [f.result(5) for f in futures]
    assert len(engine.calls) == 1
    assert len({r.model_dump_json() for r in results}) == 1
    assert b.snapshot()["deduplicated"] == 9


def test_concurrency_is_bounded_and_used(make):
    b, engine = make(delay=0.02, max_parallel=3)
    Resolver(b).map(TASK, [row(i) for i in range(30)])
    assert engine.peak == 3
    assert b.snapshot()["peak_in_engine"] == 3


def test_burst_is_sent_longest_prompt_first(make):
    b, engine = make(window_ms=100, max_parallel=1)
    rows = [row(i, text="长" * n) for i, n in enumerate([5, 50, 20, 80, 1])]
    Resolver(b).map(TASK, rows)
    sent = [len(json.loads(m[1]["content"])["report_text"]) for m in engine.calls]
    assert sent == [80, 50, 20, 5, 1]


def test_one_failure_fails_only_its_row_and_is_not_cached(make):
    def respond(messages):
        if name_of(messages) == "公司3":
            raise EngineError("engine offline (http://x)")
        return screen_answer()

    b, engine = make(respond)
    results = Resolver(b).map(TASK, [row(i) for i in range(6)])
    assert isinstance(results[3], EngineError)
    assert all(isinstance(r, ScreenResult) for i, r in enumerate(results) if i != 3)
    calls = len(engine.calls)
    again = Resolver(b).map(TASK, [row(i) for i in range(6)])  # within the failure's time: its error at once
    assert len(engine.calls) == calls and again[3] is results[3]
    again = Resolver(b, error_ttl=0).map(TASK, [row(i) for i in range(6)])  # its time over
    assert len(engine.calls) == calls + 1  # only the failed row is asked again: the others are kept
    assert isinstance(again[3], EngineError) and b.snapshot()["last_error"] == "engine offline (http://x)"


def test_bad_input_is_a_value_in_place(make):
    b, engine = make()
    results = Resolver(b).map(TASK, [row(0), {"code": "abc", "name": "x"}, row(2)])
    assert isinstance(results[1], InputError) and str(results[1]).startswith("code ")
    assert isinstance(results[0], ScreenResult) and isinstance(results[2], ScreenResult)


def test_invalid_answer_is_retried_once_then_an_error(make):
    answers = iter(['{"reason": "x"', screen_answer()])
    b, engine = make(lambda m: next(answers))
    assert isinstance(b.run(TASK, TASK.parse(row(0))), ScreenResult)
    assert len(engine.calls) == 2

    classify = ClassifyTask()  # a task whose result is the model's answer: the error stands
    b2, engine2 = make(lambda m: '{"label": 5}')
    with pytest.raises(OutputError, match="does not match the schema"):
        b2.run(classify, classify.parse({"text": "营收下降", "labels": ["利好", "利空"]}))
    assert len(engine2.calls) == 2 and b2.snapshot()["failed"] == 1


def test_a_screen_whose_answer_fails_gets_the_verdict_code_alone_can_give(make):
    b, engine = make(lambda m: '{"reason": 5}')
    text = "2023年归属于上市公司股东的净利润-2.5亿元，同比下降120%"
    res = b.run(TASK, TASK.parse(row(0, text=text, roe=3.0)))
    assert len(engine.calls) == 2  # asked, then asked again with the error
    assert res.risk_level.value == "高" and res.score is not None  # the rules need no model
    assert res.net_profit == -2.5 and res.net_profit_growth == -120  # code's readings, with their quotes
    assert "净利润「归属于上市公司股东的净利润-2.5亿元，同比下降120%」" in res.evidence  # verbatim
    assert Flag.NO_ANSWER in res.flags and res.reason == NO_ANSWER_REASON
    assert res.notes.startswith("模型未给出有效回答(model answer does not match the schema: reason:")
    assert b.lookup(TASK, TASK.parse(row(0, text=text, roe=3.0))) is None  # never cached: a rerun asks again
    snap = b.snapshot()
    assert snap["without_answer"] == 1 and snap["failed"] == 0 and snap["completed"] == 1


def test_an_unreachable_engine_is_an_error_not_a_verdict(make):
    def down(_):
        raise EngineError("engine offline (http://127.0.0.1:9/v1)")

    b, _ = make(down)
    with pytest.raises(EngineError, match="offline"):
        b.run(TASK, TASK.parse(row(0)))
    assert b.snapshot()["without_answer"] == 0


def test_lookup_never_asks_the_engine(make):
    b, engine = make()
    inp = TASK.parse(row(0))
    assert b.lookup(TASK, inp) is None and engine.calls == []
    b.run(TASK, inp)
    assert b.lookup(TASK, inp).provenance.cached is True


def test_sync_facade_is_thread_safe(make):
    b, engine = make(delay=0.01)
    results = {}

    def cell(i):
        results[i] = b.run(TASK, TASK.parse(row(i % 7)))

    threads = [threading.Thread(target=cell, args=(i,)) for i in range(40)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(results) == 40 and len(engine.calls) == 7


def test_close_leaves_a_shared_engine_open(make):
    b, engine = make()
    b.run(TASK, TASK.parse(row(0)))
    b.close()
    assert engine.closed is False


def test_map_is_bounded_when_the_engine_stalls(tmp_path):
    import asyncio

    class Stalling(ScriptedEngine):
        async def complete(self, messages, schema, params):
            if len(self.calls) >= 2:  # answers two requests, then never again
                self.calls.append(messages)
                await asyncio.sleep(3600)
            return await super().complete(messages, schema, params)

    engine = Stalling(lambda _: screen_answer(), max_parallel=1)
    with Batcher(engine, Cache(tmp_path / "c"), request_timeout=1.0, window_ms=0) as b:
        rows = [{"code": 600000 + i, "name": f"公司{i}", "roe": 10, "pe_ttm": 20} for i in range(5)]
        results = Resolver(b).map(TASK, rows)
    assert [type(r).__name__ for r in results[:2]] == ["ScreenResult", "ScreenResult"]
    assert Flag.NO_ANSWER not in results[0].flags
    # the rows whose answers never came still get what code gives: the rules' verdict, flagged 模型未作答
    assert all(Flag.NO_ANSWER in r.flags and "no answer within 1s" in r.notes for r in results[2:])
    assert [r.risk_level.value for r in results[2:]] == ["中", "中", "中"]  # ROE 10 → 中 by the rules


def test_a_stalled_table_s_report_rows_get_code_s_verdict_without_a_file_read_on_the_caller_s_thread(tmp_path,
                                                                                                   monkeypatch):
    """A table of report-file rows whose engine never answers: each row gets what code gives, with its
    report's figures where the reader has its text (read in a reader process for its request), and no file
    is read on the thread that made the table (a Refresh runs on Excel's)."""
    import asyncio

    from xladdin.reading import documents
    from xladdin.reading.documents import Reports

    class Silent(ScriptedEngine):
        async def complete(self, messages, schema, params):
            self.calls.append(messages)
            await asyncio.sleep(3600)

    for i in range(3):
        (tmp_path / f"r{i}.txt").write_text(f"2023年年度报告\n营业收入{100 + i}亿元，同比增长5%。", encoding="utf-8")
    reports = Reports.of(None, tmp_path)
    rows = [reports.place({"code": 600000 + i, "name": f"公司{i}", "roe": 10, "pe_ttm": 20,
                           "report_file": f"r{i}.txt"}, tmp_path) for i in range(3)]

    def opened_here(*args):
        raise AssertionError(f"a report file was read on the caller's thread: {args}")

    monkeypatch.setattr(documents, "read_document", opened_here)  # the reader processes read in their own
    with Batcher(Silent(lambda _: screen_answer(), max_parallel=1), Cache(tmp_path / "c"), request_timeout=1.0,
                 window_ms=0) as b:
        results = Resolver(b).map(TASK, rows)
    assert all(isinstance(r, ScreenResult) and Flag.NO_ANSWER in r.flags for r in results), results
    assert all(f"r{i}.txt" in r.read for i, r in enumerate(results)), [r.read for r in results]  # its report


def test_a_prepared_request_is_data_that_pickles_and_finishes_its_answer_the_same(tmp_path):
    """A request made once carries its task and input as data (no closures): a pickled copy (a Ray job's
    actors pass them) validates and finishes the same answer to the same result."""
    import pickle

    row = {"code": "600000", "name": "浦发银行", "roe": 12, "pe_ttm": 20, "report_text": "营收100亿元"}
    with Batcher(ScriptedEngine(lambda _: screen_answer()), Cache(tmp_path / "c")) as b:
        b.start()
        request = b.prepare(ScreenTask(), ScreenTask().parse(row))
    copy = pickle.loads(pickle.dumps(request))
    assert (copy.key, copy.model, copy.messages, copy.schema) == (request.key, request.model, request.messages,
                                                                  request.schema)
    results = [r.finish(r.validate(screen_answer()), False) for r in (request, copy)]
    assert isinstance(results[0], ScreenResult) and results[0] == results[1]
    assert results[0].provenance.model == request.model and not results[0].provenance.cached
