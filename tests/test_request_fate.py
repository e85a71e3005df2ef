"""Each request's fate reaches the cells that asked through its fate, not through the disk: with the
cache off or unwritable, cells recalculated as desktop Excel does (a caller, recalculation when the
answer arrives) each get their final value, with one engine request per distinct row."""

from __future__ import annotations

import threading

import pytest
from kit import Caller, cache_for, recalculates

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.excel import udfs
from xladdin.sheet import functions
from xladdin.sheet.functions import CellRuntime
from xladdin.testing import ScriptedEngine, screen_answer


@pytest.mark.parametrize("kind", ["off", "unwritable"])
def test_500_cells_reach_their_values_without_a_disk_cache(kind, tmp_path):
    engine = ScriptedEngine(lambda _: screen_answer("经营稳健"), delay=0.01, max_parallel=16)
    recalc: list[Caller] = []
    lock = threading.Lock()
    all_settled = threading.Event()
    n = 500

    waiting = [n]  # the cells shown pending (a cell whose answer came within its read's wait has its value)

    def rewrite(caller: Caller) -> None:  # Excel recalculates the cell
        with lock:
            recalc.append(caller)
            if len(recalc) >= waiting[0]:
                all_settled.set()

    rt = CellRuntime(batcher=Batcher(engine, cache_for(kind, tmp_path), window_ms=0), told=recalculates(rewrite))
    udfs.set_runtime(rt)
    try:
        rows = [[600000.0 + i, f"公司{i}", "行业", 20.0, 18.0, 1.0, f"营业收入{100 + i}亿元"] for i in range(n)]
        callers = [Caller(f"$L${i + 2}") for i in range(n)]
        first = [udfs.QWEN_SCREEN([r], False, None, c)[0][0] for r, c in zip(rows, callers, strict=True)]
        assert set(first) <= {functions.PENDING, *(f"{600000 + i}.SH" for i in range(n))}
        with lock:  # on a loaded machine an answer may come before its cell has finished waiting for its read
            waiting[0] = first.count(functions.PENDING)
            if len(recalc) >= waiting[0]:
                all_settled.set()
        assert all_settled.wait(60), (len(recalc), waiting[0])
        final = [udfs.QWEN_SCREEN([r], False, None, c)[0] for r, c in zip(rows, callers, strict=True)]
        assert [f[0] for f in final] == [f"{600000 + i}.SH" for i in range(n)]  # every cell has its verdict
        assert {f[functions.SPILL_FIELDS.index("risk_level")] for f in final} == {"低"}
        assert len(engine.calls) == n  # one request per distinct row, none asked again
        assert len(recalc) == waiting[0]  # each pending cell recalculated once: no loop
    finally:
        udfs.set_runtime(None)
        rt.close()


def _cpu_server(model, port: int):
    from xladdin.server import launcher

    cmd = launcher.cpu_server_command(str(model), host="127.0.0.1", port=port, parallel=1)
    server = launcher.ServerProcess(cmd, f"http://127.0.0.1:{port}", env=dict(__import__("os").environ,
                                                                              XLADDIN_N_THREADS="1"))
    server.__enter__()
    server.wait_ready(120)
    return server


def _rows(n: int, start: int = 0) -> list[dict]:
    return [{"code": 600000 + i, "name": f"公司{i}", "roe": 20, "pe_ttm": 10, "report_text": f"营收{i}亿元"}
            for i in range(start, start + n)]


@pytest.mark.slow
def test_two_servers_one_killed_mid_run_every_row_is_answered_by_the_other(tiny_model_path, tmp_path):
    from conftest import tiny_settings
    from kit import free_port

    from xladdin.core.resolver import Resolver
    from xladdin.tasks import ScreenResult, ScreenTask

    a, b = _cpu_server(tiny_model_path, free_port()), _cpu_server(tiny_model_path, free_port())
    try:
        urls = f"{a.base_url}/v1,{b.base_url}/v1"
        done = []

        def on_result(i, res):
            done.append(res)
            if len(done) == 3:
                a.proc.kill()  # one server goes away mid-run

        with Batcher.from_settings(tiny_settings(tmp_path, engine_url=urls, retries=0, timeout=60)) as batcher:
            results = Resolver(batcher).map(ScreenTask(), _rows(24), on_result)
            engine = batcher.engine
        lost = [r for r in results if not isinstance(r, ScreenResult)]
        assert not lost, lost
        assert 0 in engine.down and engine.answered[1] >= 12 and "down: " in engine.describe()
        # a server down at the start: the run starts on the other, naming it
        with Batcher.from_settings(tiny_settings(tmp_path / "2", engine_url=urls, retries=0)) as batcher:
            results = Resolver(batcher).map(ScreenTask(), _rows(4, 100))
            assert all(isinstance(r, ScreenResult) for r in results) and a.base_url in batcher.engine.describe()
    finally:
        for s in (a, b):
            s.__exit__(None, None, None)


@pytest.mark.slow
def test_a_server_replaced_by_another_model_never_stores_its_answers_under_the_first(tiny_model_path, tmp_path,
                                                                                     monkeypatch):
    from conftest import tiny_settings
    from kit import free_port

    from xladdin.core.resolver import Resolver
    from xladdin.engine import openai_http
    from xladdin.tasks import ScreenResult, ScreenTask
    from xladdin.testing import write_tiny_qwen_gguf

    monkeypatch.setattr(openai_http, "DOWN_RETRY_S", 0.2)
    other = write_tiny_qwen_gguf(tmp_path / "other-model.gguf", seed=7)
    port = free_port()
    first = _cpu_server(tiny_model_path, port)
    settings = tiny_settings(tmp_path, engine_url=f"http://127.0.0.1:{port}/v1", retries=0, timeout=60)
    with Batcher.from_settings(settings) as batcher:
        try:
            before = Resolver(batcher).map(ScreenTask(), _rows(2))
            model = batcher.engine.model_id
        finally:
            first.__exit__(None, None, None)
        second = _cpu_server(other, port)  # another model at the same URL, the process still running
        try:
            after = Resolver(batcher).map(ScreenTask(), _rows(2, 50))
        finally:
            second.__exit__(None, None, None)
        entries = batcher.cache.stats()["entries"]
    assert all(isinstance(r, ScreenResult) and r.provenance.model == model for r in before)
    assert all(not isinstance(r, ScreenResult) for r in after), after
    assert "serve" in str(after[0]) and "other-model" in str(after[0])  # the row names what happened
    assert entries == 2  # only the first model's answers, under its key


def test_status_shows_hit_rate_one_for_a_sheet_answered_wholly_from_the_cache(tmp_path):
    rows = [[600000.0 + i, f"公司{i}", "行业", 20.0, 18.0, 1.0, f"营业收入{100 + i}亿元"] for i in range(20)]
    first = CellRuntime(batcher=Batcher(ScriptedEngine(lambda _: screen_answer()), Cache(tmp_path / "c")))
    udfs.set_runtime(first)
    try:
        assert all(udfs.QWEN_SCREEN([r])[0][0] != functions.PENDING for r in rows)  # no caller: waits, fills the cache
    finally:
        udfs.set_runtime(None)
        first.close()
    engine = ScriptedEngine(lambda _: screen_answer())
    reopened = CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c")))  # the workbook opened again
    udfs.set_runtime(reopened)
    try:
        for _ in range(2):  # open, then recalculate: from the disk, then from memory
            assert all(udfs.QWEN_SCREEN([r], False, None, Caller(f"$L${i}"))[0][0] == f"{600000 + i}.SH"
                       for i, r in enumerate(rows))
        status = dict(udfs.QWEN_STATUS())
    finally:
        udfs.set_runtime(None)
        reopened.close()
    assert status["cache hit rate"] == 1.0 and status["asked of the engine"] == 0 and status["requests"] == 40
    assert engine.calls == []


def test_one_default_per_setting_both_construction_paths_key_a_row_alike(tmp_path, monkeypatch):
    from xladdin.settings import Settings
    from xladdin.tasks import ScreenTask

    monkeypatch.setenv("XLADDIN_CACHE_DIR", str(tmp_path / "c"))
    task = ScreenTask()
    inp = task.parse({"code": "600519", "name": "贵州茅台", "report_text": "营业收入1505.60亿元。" * 400})
    keys = []
    for make in (lambda e: Batcher(e, Cache(tmp_path / "a")), lambda e: Batcher.from_settings(Settings.load(), e)):
        with make(ScriptedEngine(lambda _: screen_answer())) as b:
            b.start()
            keys.append((b.key(task, inp), b.fit(task).text_limit, b.params))
    assert keys[0] == keys[1]


def test_an_answer_given_after_the_engine_changed_model_is_not_stored(tmp_path):
    """The prepared request names the model of its key; an answer arriving when the engine serves
    another is not stored under that key, and the row says why."""
    from xladdin.errors import EngineError
    from xladdin.tasks import ScreenTask

    task = ScreenTask()
    inp = task.parse({"code": "600519", "name": "贵州茅台", "report_text": "营业收入1505.60亿元。"})
    engine = ScriptedEngine(lambda _: screen_answer())

    def swapped(_):
        engine.model_id = "another-model"  # the server behind the engine was replaced mid-request
        return screen_answer()

    with Batcher(engine, Cache(tmp_path / "c")) as b:
        b.start()
        asked = b.prepare(task, inp)
        engine.respond = swapped
        with pytest.raises(EngineError, match="asked of scripted-model: the answer is not stored"):
            b.run(task, inp)
        assert b.cache.get(asked.key) is None and b.snapshot()["failed"] == 1
        engine.respond = lambda _: screen_answer()
        assert b.run(task, inp).provenance.model == "another-model"  # asked again, under the new model's key
        assert b.cache.get(b.prepare(task, inp).key) is not None and b.cache.get(asked.key) is None


def test_a_misspelt_variable_is_named_with_the_setting_it_resembles(tmp_path):
    from kit import run_cli

    env = {**__import__("os").environ, "XLADDIN_ENGIN_URL": "http://127.0.0.1:9/v1", "XLADDIN_NO_CACHE": "1"}
    r = run_cli("cache", "stats", "--cache-dir", tmp_path / "c", env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "XLADDIN_ENGIN_URL is not a setting and is ignored; did you mean XLADDIN_ENGINE_URL?" in r.stderr
    assert "XLADDIN_NO_CACHE" not in r.stderr  # a real setting: no warning
