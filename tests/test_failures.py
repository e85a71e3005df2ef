"""The one rule of every memory of a failure: a failure is the answer for its time, then forgotten; a success
forgets it at once; the memory is bounded. The requests' fates and the engine's start (one table,
``fates.Fates``) and the report files' reads (``fates.Failures``) keep theirs for the same time."""

from __future__ import annotations

import pytest

from xladdin.core import fates
from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.fates import ERROR_TTL, Failures
from xladdin.core.readers import Reader
from xladdin.core.resolver import Resolver
from xladdin.errors import EngineError, InputError
from xladdin.tasks import ScreenTask
from xladdin.testing import ScriptedEngine

TASK = ScreenTask()
ROW = {"code": "600519", "name": "贵州茅台", "pe_ttm": 20, "roe": 30}


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(fates.time, "monotonic", lambda: now[0])
    return now


def test_a_failure_is_the_answer_for_its_time_then_forgotten(clock):
    f = Failures(ttl=30.0, kept=2)
    error = InputError("报告文件", "x.pdf: cannot be read")
    f.put("x", error)
    clock[0] += 29.9
    assert f.get("x") is error
    clock[0] += 0.2
    assert f.get("x") is None and len(f) == 0  # tried again, and nothing kept of it
    f.put("x", error)
    f.forget("x")  # it succeeded meanwhile
    assert f.get("x") is None
    for key in "abc":
        f.put(key, error)
    assert len(f) == 2 and f.get("a") is None and f.get("c") is error  # bounded: the oldest forgotten


class CannotStart(ScriptedEngine):
    starts = 0

    async def start(self):
        self.starts += 1
        raise EngineError("engine offline (http://127.0.0.1:9)")


def test_an_engine_that_cannot_start_is_that_error_for_its_time(clock, tmp_path):
    engine = CannotStart(lambda _: "{}")
    batcher = Batcher(engine, Cache(tmp_path / "c"))
    try:
        with pytest.raises(EngineError):
            batcher.start()
        with pytest.raises(EngineError, match="engine offline"):  # at once, not started again
            batcher.start()
        rows = Resolver(batcher).map(TASK, [ROW])
        assert isinstance(rows[0], EngineError) and engine.starts == 1
        clock[0] += ERROR_TTL  # its time is over: started again on the next request
        with pytest.raises(EngineError):
            batcher.start()
        assert engine.starts == 2
    finally:
        batcher.close()


def test_requests_the_engine_start_and_report_files_keep_their_failures_alike(tmp_path):
    batcher = Batcher(ScriptedEngine(lambda _: "{}"), Cache(tmp_path / "c"))
    try:
        assert Resolver(batcher).fates is batcher.fates and batcher.fates.ttl == ERROR_TTL
        reader = Reader(Cache(tmp_path / "d"), processes=1)._errors
        assert isinstance(reader, Failures) and reader.ttl == ERROR_TTL
    finally:
        batcher.close()


def test_a_pace_that_saw_no_answer_in_the_engines_time_waits_no_more_until_one_comes():
    """``Pacer``: a thread making many requests waits while too many are unanswered; when a wait ends with
    no answer at all (a stalled engine), the requests after it are made at once, not each after a wait of
    its own (300 waits of the engine's time), and an answer starts the pace again."""
    import concurrent.futures
    import threading
    from types import SimpleNamespace

    from xladdin.core.resolver import ROWS_AHEAD, Pacer

    class Counted(threading.Condition):
        waits = 0

        def wait(self, timeout=None):
            Counted.waits += 1
            return super().wait(timeout)

    batcher = SimpleNamespace(window=SimpleNamespace(limit=1), request_timeout=0.01)
    pacer = Pacer(batcher)
    pacer._changed = Counted()
    fates = [concurrent.futures.Future() for _ in range(1 + ROWS_AHEAD + 300)]
    for fate in fates:
        pacer.add([fate])
    assert Counted.waits == 1  # one wait that saw no answer, then none
    fates[0].set_result(None)  # an answer: paced again
    pacer.add([concurrent.futures.Future()])
    assert Counted.waits == 2
