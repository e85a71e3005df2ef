"""The one rule of every memory of a failure (``cache.Failures``): a failure is the answer for its time,
then forgotten; a success forgets it at once; the memory is bounded. The requests' fates, the engine's start
and the report files' reads all keep theirs by it, for the same time."""

from __future__ import annotations

import pytest

from xladdin.core import cache
from xladdin.core.batcher import Batcher
from xladdin.core.cache import ERROR_TTL, Cache, Failures, SharedStart
from xladdin.core.readers import Reader
from xladdin.core.resolver import Resolver
from xladdin.errors import EngineError, InputError
from xladdin.testing import ScriptedEngine


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(cache.time, "monotonic", lambda: now[0])
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


def test_an_engine_that_cannot_start_is_that_error_for_its_time(clock):
    import asyncio

    async def cannot() -> None:
        raise EngineError("engine offline (http://127.0.0.1:9)")

    start = SharedStart(cannot)
    with pytest.raises(EngineError):
        asyncio.run(start())
    with pytest.raises(EngineError, match="engine offline"):
        start.raise_recent_failure()
    clock[0] += ERROR_TTL
    start.raise_recent_failure()  # its time is over: started again on the next request


def test_requests_the_engine_start_and_report_files_keep_their_failures_alike(tmp_path):
    batcher = Batcher(ScriptedEngine(lambda _: "{}"), Cache(tmp_path / "c"))
    try:
        memories = [Resolver(batcher).fates.failures, batcher.shared_start._failed,
                    Reader(Cache(tmp_path / "d"), processes=1)._errors]
        assert all(isinstance(m, Failures) and m.ttl == ERROR_TTL for m in memories)
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
    tickets = [concurrent.futures.Future() for _ in range(1 + ROWS_AHEAD + 300)]
    for ticket in tickets:
        pacer.add([ticket])
    assert Counted.waits == 1  # one wait that saw no answer, then none
    tickets[0].set_result(None)  # an answer: paced again
    pacer.add([concurrent.futures.Future()])
    assert Counted.waits == 2
