"""One table holds each request's fate (``resolver.Fates``): a cell asked again while its request is out
joins it (the same fate: nothing prepared, keyed or looked up on disk again), and its result or its
failure is then served from the table, through Excel's own call path."""

from __future__ import annotations

import threading

from kit import Caller, wait_until

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Done, Failed, Pending, Resolver
from xladdin.errors import EngineError
from xladdin.excel import udfs
from xladdin.sheet import functions
from xladdin.sheet.functions import CellRuntime
from xladdin.tasks.screen import ScreenTask
from xladdin.testing import ScriptedEngine, screen_answer

ROW = [600519.0, "贵州茅台", "白酒", 30.0, 25.0, 50.0, "营业收入1000亿元"]


def test_a_cell_recalculated_while_its_request_is_out_joins_it_and_reads_nothing_again(tmp_path):
    release = threading.Event()

    def respond(_):
        release.wait(30)
        return screen_answer("经营稳健")

    engine = ScriptedEngine(respond, max_parallel=2)
    recalculated = threading.Event()
    rt = CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0), told=lambda _: recalculated.set())
    udfs.set_runtime(rt)
    reads = []
    try:
        cell = Caller("$I$2")
        rt.batcher.start()  # a sheet recalculated after its first cells started the engine
        get = rt.batcher.cache.get
        rt.batcher.cache.get = lambda key: reads.append(key) or get(key)  # the disk cache's reads, counted
        assert udfs.QWEN_SCREEN([ROW], False, None, cell)[0][0] == functions.PENDING
        for _ in range(3):  # Excel recalculates the sheet while the answer is out
            assert udfs.QWEN_SCREEN([ROW], False, None, cell)[0][0] == functions.PENDING
        assert len(reads) == 1  # its one read, on the first call
        release.set()
        assert recalculated.wait(30)
        final = udfs.QWEN_SCREEN([ROW], False, None, cell)[0]
        assert final[0] == "600519.SH" and final[functions.SPILL_FIELDS.index("reason")] == "经营稳健"
        assert len(reads) == 1 and len(engine.calls) == 1  # one read, one request; the value from the table
    finally:
        udfs.set_runtime(None)
        rt.close()


def test_a_failed_request_is_its_cells_error_for_the_ttl_then_asked_again(tmp_path):
    answers = iter([EngineError("server down"), screen_answer("经营稳健")])

    def respond(_):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    engine = ScriptedEngine(respond)
    with Batcher(engine, Cache(tmp_path / "c"), window_ms=0) as b:
        resolver = Resolver(b, error_ttl=60)
        record = {"code": "600519", "name": "贵州茅台", "roe": 25, "pe_ttm": 30}
        first = resolver.resolve(ScreenTask(), record)
        assert isinstance(first, Pending) and isinstance(first.fate.exception(10), EngineError)
        again = resolver.resolve(ScreenTask(), record)
        assert isinstance(again, Failed) and "server down" in str(again.error) and len(engine.calls) == 1
        resolver.error_ttl = 0  # the failure has aged
        later = resolver.resolve(ScreenTask(), record)
        assert isinstance(later, Pending) and later.fate.result(10).reason == "经营稳健"
        assert isinstance(resolver.resolve(ScreenTask(), record), Done) and len(engine.calls) == 2


def test_the_cells_and_calc_calls_waiting_on_a_request_are_in_the_one_fate_table(tmp_path):
    """A pending Excel cell and a pending Calc call wait in the resolver's fate table (``Fates.watch``):
    one waiter per cell however often it is asked, gone once its request settles, after which the cell is
    recalculated and finds its result there."""
    from xladdin.calc.runtime import CalcFunctions, Waiting

    release = threading.Event()

    def respond(_):
        release.wait(30)
        return screen_answer("经营稳健")

    recalculated = threading.Event()
    rt = CellRuntime(batcher=Batcher(ScriptedEngine(respond), Cache(tmp_path / "c")),
                     told=lambda _: recalculated.set())
    udfs.set_runtime(rt)
    posted: list = []
    calc = CalcFunctions(lambda: Waiting(lambda source, value: value), posted.append,
                         batcher=Batcher(ScriptedEngine(respond), Cache(tmp_path / "c2")))
    try:
        caller = Caller("$H$2")
        for _ in range(3):  # Excel recalculates the cell while its request is out
            assert udfs.QWEN_SCREEN([ROW], False, None, caller)[0][0] == functions.PENDING
        pending = calc.call("QWEN_SCREEN", ((tuple(ROW),), None, None))
        fates = rt.resolver.fates
        assert fates.waiting == 1 and rt.pending_cells == 1  # one cell, one waiter
        assert calc.runtime().resolver.fates.waiting == 1  # the Calc call waits in its runtime's table
        release.set()
        assert recalculated.wait(10)
        assert fates.waiting == 0 and isinstance(rt.resolver.resolve(ScreenTask(), dict(
            zip(functions.POSITIONAL, ROW, strict=False))), Done)
        assert udfs.QWEN_SCREEN([ROW], False, None, caller)[0][0] == "600519.SH"
        wait_until(lambda: posted, 10, message="the Calc call's settle was not posted")
        posted.pop()()
        assert pending.final and pending.value[0][0] == "600519.SH"
        assert calc.runtime().resolver.fates.waiting == 0
    finally:
        release.set()
        udfs.set_runtime(None)
        rt.close()
        calc.close()
