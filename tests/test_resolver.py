"""The resolver: every request's outcome at once — Done, Pending or Failed."""

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Done, Failed, Pending, Resolver
from xladdin.errors import EngineError
from xladdin.tasks import ScreenTask
from xladdin.tasks.screen import NO_ANSWER_REASON
from xladdin.testing import ScriptedEngine, screen_answer

TASK = ScreenTask()
ROW = {"code": "600519", "name": "贵州茅台", "roe": 30, "pe_ttm": 25}


def test_outcomes(tmp_path):
    engine = ScriptedEngine(lambda _: screen_answer("稳健"))
    with Batcher(engine, Cache(tmp_path / "c")) as b:
        r = Resolver(b)
        first = r.resolve(TASK, ROW)
        assert isinstance(first, Pending)
        assert first.fate.result(10).reason == "稳健"
        second = r.resolve(TASK, ROW)  # the fate's own outcome, kept in memory: not read back from the disk
        assert isinstance(second, Done) and second.result is first.fate.result()
        assert isinstance(r.resolve(TASK, ROW), Done) and len(engine.calls) == 1
        assert isinstance(Resolver(b).resolve(TASK, ROW), Done)  # another door of this core: the one table
        with Batcher(engine, Cache(tmp_path / "c")) as other:  # another process: a fate, settled by its disk read
            other.start()
            fresh = Resolver(other).resolve(TASK, ROW)
            assert isinstance(fresh, Pending)
            other.fates.wait_looked([fresh.fate], 10)  # its read done: the hit has settled the fate by then
            assert fresh.fate.done()
            assert fresh.fate.result().provenance.cached and len(engine.calls) == 1
        bad = r.resolve(TASK, {**ROW, "roe": "N/A x"})
        assert isinstance(bad, Failed) and str(bad.error) == "roe is not a number: 'N/A x'"


def test_a_failure_is_returned_for_a_while_then_asked_again(tmp_path):
    def fail(_):
        raise EngineError("engine error 503 (http://gpu:8000/v1): overloaded")

    engine = ScriptedEngine(fail)
    with Batcher(engine, Cache(tmp_path / "c"), output_retries=0) as b:
        r = Resolver(b, error_ttl=60)
        pending = r.resolve(TASK, ROW)
        assert isinstance(pending, Pending) and isinstance(pending.fate.exception(10), EngineError)
        again = r.resolve(TASK, ROW)
        assert isinstance(again, Failed) and "overloaded" in str(again.error) and len(engine.calls) == 1
        r.error_ttl = 0
        assert isinstance(r.resolve(TASK, ROW), Pending)


def test_a_verdict_without_a_model_answer_is_not_asked_again_on_recalculation(tmp_path):
    """A sheet recalculates a cell when its fate settles: an answer that failed (and is never
    cached) must not send the model the same request again, and again."""
    engine = ScriptedEngine(lambda _: '{"reason": 5}')  # never a valid answer
    with Batcher(engine, Cache(tmp_path / "c")) as b:
        r = Resolver(b)
        first = r.resolve(TASK, ROW)
        assert isinstance(first, Pending) and first.fate.result(10).reason == NO_ANSWER_REASON
        assert len(engine.calls) == 2  # asked, then asked again with the error
        for _ in range(3):  # the recalculations that follow
            again = r.resolve(TASK, ROW)
            assert isinstance(again, Done) and again.result.reason == NO_ANSWER_REASON
        assert len(engine.calls) == 2 and Cache(tmp_path / "c").stats()["entries"] == 0
    with Batcher(ScriptedEngine(lambda _: screen_answer("稳健")), Cache(tmp_path / "c")) as b:
        assert Resolver(b).resolve(TASK, ROW).fate.result(10).reason == "稳健"  # a new process asks again
