"""The disk cache is read and written on the batcher's disk thread alone, once per request: never on a cell's
thread (a slow, locked or failing disk never holds up or fails a cell), never on the loop that drives the
engine's requests; a cell waits a bounded time for its read, so a reopened workbook gets its values at once."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time

import pytest
from conftest import Server, vllm_models
from kit import DISK_THREAD, Caller, recalculates, record_disk, run_main, wait_until

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Resolver
from xladdin.excel import udfs
from xladdin.sheet import functions
from xladdin.sheet.functions import CellRuntime
from xladdin.tasks import ScreenResult, ScreenTask
from xladdin.testing import ScriptedEngine, screen_answer

ROWS = [[600000.0 + i, f"公司{i}", "行业", 20.0, 18.0, 1.0, f"营业收入{100 + i}亿元"] for i in range(6)]


def threads(disk: list[tuple[str, str, str]]) -> set[str]:
    """The threads the reads and writes ran on, by name (a pool's threads are named ``prefix_n``)."""
    return {thread.rpartition("_")[0] or thread for _, _, thread in disk}


def fill(tmp_path) -> None:
    """The workbook's first session: its cells answered (no caller: each call waits) and cached."""
    first = CellRuntime(batcher=Batcher(ScriptedEngine(lambda _: screen_answer("经营稳健")), Cache(tmp_path / "c")))
    udfs.set_runtime(first)
    try:
        assert all(udfs.QWEN_SCREEN([r])[0][0] == f"{600000 + i}.SH" for i, r in enumerate(ROWS))
    finally:
        udfs.set_runtime(None)
        first.close()


class Recalculated(list):
    """The runtime's ``rewrite``: the cells Excel is asked to recalculate."""

    def __call__(self, caller):
        self.append(caller)


def reopen(tmp_path, recalculated) -> tuple[CellRuntime, ScriptedEngine]:
    """The workbook opened again: a runtime of its own on the same cache, its engine started (by the first
    cells of the sheet)."""
    engine = ScriptedEngine(lambda _: screen_answer("经营稳健"))
    rt = CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0), told=recalculates(recalculated))
    udfs.set_runtime(rt)
    rt.batcher.start()
    return rt, engine


def report_book(tmp_path) -> tuple:
    """A workbook's folder holding one annual report, and a row naming it (the workbook's path, the row)."""
    from test_documents import PAGE_1, PAGE_2, make_pdf

    book = tmp_path / "book" / "pool.xlsx"
    book.parent.mkdir()
    make_pdf(book.parent / "688001_年报.pdf", [PAGE_1, PAGE_2])
    return book, [688001.0, "华兴源创", "设备", -40.0, None, None, "688001_年报.pdf"]


def report_file(tmp_path, name: str = "688001_年报.pdf"):
    """An annual report written in ``tmp_path``, as the path a row names (its folder allowed)."""
    from test_documents import PAGE_1, PAGE_2, make_pdf

    from xladdin.reading.documents import ReportPath, Reports

    make_pdf(tmp_path / name, [PAGE_1, PAGE_2])
    return ReportPath(str(tmp_path / name), Reports((tmp_path.resolve(),)))


def file_session(tmp_path, recalculated=None) -> CellRuntime:
    """One Excel session of that workbook: a runtime on the cache in ``tmp_path``, its engine started."""
    from xladdin.settings import Settings

    rt = CellRuntime(Settings.load({"cache_dir": tmp_path / "c"}),
                     batcher=Batcher(ScriptedEngine(lambda _: screen_answer("经营稳健")), Cache(tmp_path / "c"),
                                     window_ms=0),
                     told=None if recalculated is None else recalculates(recalculated))
    udfs.set_runtime(rt)
    rt.batcher.start()
    return rt


def test_a_reopened_workbook_gets_its_values_at_once_read_on_the_disk_thread(tmp_path, monkeypatch):
    fill(tmp_path)
    disk = record_disk(monkeypatch)
    recalculated = Recalculated()
    rt, engine = reopen(tmp_path, recalculated)
    try:
        first = [udfs.QWEN_SCREEN([r], False, None, Caller(f"$L${i + 2}"))[0] for i, r in enumerate(ROWS)]
        assert [f[0] for f in first] == [f"{600000 + i}.SH" for i in range(len(ROWS))]  # no placeholder
        assert first[0][functions.SPILL_FIELDS.index("reason")] == "经营稳健"
        assert recalculated == [] and rt.pending_cells == 0 and engine.calls == []  # no cell waits: none recalculated
        assert len(disk) == len(ROWS) and threads(disk) == {DISK_THREAD}, disk  # one read each, on the disk thread
    finally:
        udfs.set_runtime(None)
        rt.close()


def test_a_whole_table_in_one_call_gets_its_values_at_once_when_reopened(tmp_path, monkeypatch):
    """``=QWEN_SCREEN(A2:G7)``: one call for the table; its rows' reads are sent together and waited for
    together (one bound for the call), so the reopened table shows every value on its first call."""
    fill(tmp_path)
    disk = record_disk(monkeypatch)
    recalculated = Recalculated()
    rt, engine = reopen(tmp_path, recalculated)
    try:
        table = udfs.QWEN_SCREEN(ROWS, False, None, Caller("$L$2"))
        assert [row[0] for row in table] == [f"{600000 + i}.SH" for i in range(len(ROWS))]  # no placeholder
        assert recalculated == [] and rt.pending_cells == 0 and engine.calls == []
        assert len(disk) == len(ROWS) and threads(disk) == {DISK_THREAD}, disk
    finally:
        udfs.set_runtime(None)
        rt.close()


@pytest.mark.parametrize("disk", ["slow", "raises", "hangs"])
def test_a_slow_failing_or_hanging_read_never_holds_up_the_cell(disk, tmp_path, monkeypatch):
    """A read longer than the cell's bound gives the placeholder at once, then the value after the
    recalculation (from the cache, the engine not asked); a read that fails is a miss (asked of the engine);
    one that hangs holds up the disk thread alone (the cell has its placeholder), and the request is then
    answered."""
    fill(tmp_path)
    monkeypatch.setattr(functions, "READ_WAIT_S", 0.2, raising=False)
    reads = record_disk(monkeypatch)
    recalculated = Recalculated()
    rt, engine = reopen(tmp_path, recalculated)
    release = threading.Event()
    store = rt.batcher.cache._dc
    real = store.get

    def read(key, *args, **kwargs):
        if disk == "slow":
            time.sleep(1.0)  # five times the bound
        elif disk == "raises":
            raise OSError("disk I/O error")
        else:
            release.wait(60)
        return real(key, *args, **kwargs)

    monkeypatch.setattr(store, "get", read)
    cell = Caller("$L$2")
    excel = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="excel")  # the cell's thread
    try:
        call = excel.submit(udfs.QWEN_SCREEN, [ROWS[0]], False, None, cell)
        try:
            shown = call.result(5)
        except concurrent.futures.TimeoutError:
            pytest.fail("the cell's call waited on the disk")
        assert shown[0][0] == functions.PENDING
        release.set()
        wait_until(lambda: recalculated, 30, message="the cell was never recalculated")
        assert recalculated == [cell]
        again = excel.submit(udfs.QWEN_SCREEN, [ROWS[0]], False, None, cell).result(5)[0]
        assert again[0] == "600000.SH" and again[functions.SPILL_FIELDS.index("reason")] == "经营稳健"
        assert len(engine.calls) == (1 if disk == "raises" else 0)  # a failed read is a miss; a slow one a hit
        assert rt.batcher.cache.hits + rt.batcher.cache.misses == 1  # read once
        assert [op for op, _, _ in reads].count("get") == 1 and threads(reads) == {DISK_THREAD}, reads
    finally:
        release.set()
        excel.shutdown()
        udfs.set_runtime(None)
        rt.close()


class Held(ScriptedEngine):
    """Answers each request once ``release`` is set (waiting on the loop, not blocking it)."""

    def __init__(self):
        super().__init__(lambda _: screen_answer("经营稳健"))
        self.release = threading.Event()

    async def complete(self, messages, schema, params) -> str:
        self.calls.append(messages)
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        return self.respond(messages)


@pytest.mark.parametrize("kind", ["works", "off"])
def test_the_same_request_asked_under_another_input_while_out_joins_it_and_reads_nothing(kind, tmp_path,
                                                                                         monkeypatch):
    """Two front doors ask the same request from two threads under two inputs (the row's fields in another
    order: two keys by input, one request): the second, asked while the first is in the engine, joins it in
    the one table by its cache key. The engine is asked once and the disk read once (with the cache off too)."""
    disk = record_disk(monkeypatch)
    engine = Held()
    cache = Cache(tmp_path / "c", enabled=kind == "works")
    with Batcher(engine, cache, window_ms=0) as b:
        b.start()
        record = {"code": "600519", "name": "贵州茅台", "roe": 25, "pe_ttm": 30}
        outcomes: dict[str, object] = {}

        def door(name, rec):
            outcomes[name] = Resolver(b).resolve(ScreenTask(), rec)

        one = threading.Thread(target=door, args=("one", record))
        one.start()
        one.join()
        wait_until(lambda: engine.calls, 10, message="the first request never reached the engine")
        two = threading.Thread(target=door, args=("two", dict(reversed(record.items()))))
        two.start()
        two.join()
        assert outcomes["one"].fate is not outcomes["two"].fate  # two inputs…
        engine.release.set()
        first = outcomes["one"].fate.result(10)
        second = outcomes["two"].fate.result(10)
    assert first is second  # …one request
    assert isinstance(first, ScreenResult) and len(engine.calls) == 1  # asked once
    assert [op for op, _, _ in disk].count("get") == 1, disk  # read once
    assert threads(disk) <= {DISK_THREAD}


def test_the_cli_reads_and_writes_the_cache_on_the_disk_thread_once_per_row(tmp_path, monkeypatch, capsys):
    """``xladdin screen`` of a pool, twice: the rows are read once each, on the disk thread (the main thread
    only prepares them), and their answers written there; the rerun reads each once and asks nothing. What
    the engine's start reads and writes in the side store (the server's model, tokens per character) is on
    the disk thread too, never on the loop that drives the requests. Every row's result, from the engine's
    answer or from the stored one, is made on the batcher's rows thread: neither the disk thread nor the
    loop spends its time on a row's rules and checks."""
    from xladdin.core.requests import Prepared

    side: list[tuple[str, str, str]] = []
    finished: list[str] = []
    finish = Prepared.finish

    def finishing(self, out, cached):
        finished.append(threading.current_thread().name)
        return finish(self, out, cached)

    monkeypatch.setattr(Prepared, "finish", finishing)

    def recording(op):
        real = getattr(Cache, op)

        def recorded(self, name, *value):
            side.append((op, name.partition("@")[0], threading.current_thread().name))
            return real(self, name, *value)
        return recorded

    for op in ("get_meta", "set_meta"):
        monkeypatch.setattr(Cache, op, recording(op))

    def chat(body):
        data = {"id": "c", "object": "chat.completion", "created": 0, "model": "qwen",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": screen_answer("经营稳健")}}]}
        return 200, "application/json", json.dumps(data, ensure_ascii=False).encode()

    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,ROE,市盈率TTM,财报摘要\n" + "".join(
        f"{600000 + i},公司{i},18,20,营业收入{100 + i}亿元\n" for i in range(len(ROWS))), encoding="utf-8")
    server = Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": chat})
    disk = record_disk(monkeypatch)
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        runs = []
        for n in (1, 2):
            r = run_main(capsys, "screen", pool, "-o", tmp_path / f"o{n}.json", "--no-progress")
            assert r.returncode == 0, r.stderr
            rows = json.loads((tmp_path / f"o{n}.json").read_text(encoding="utf-8"))["rows"]
            assert len(rows) == len(ROWS)
            runs.append(([op for op, _, _ in disk].count("get"), [op for op, _, _ in disk].count("set"),
                         server.hits.count("/v1/chat/completions")))
    finally:
        server.close()
    assert runs == [(len(ROWS), len(ROWS), len(ROWS)), (2 * len(ROWS), len(ROWS), len(ROWS))]
    assert threads(disk) == {DISK_THREAD}, disk
    assert {("set_meta", "model"), ("get_meta", "tokens_per_char")} <= {(op, name) for op, name, _ in side}, side
    assert threads(side) == {DISK_THREAD}, side
    assert len(finished) == 2 * len(ROWS) and threads([("", "", t) for t in finished]) == {"xladdin-rows"}, finished


@pytest.mark.parametrize("code_changed", [False, True])
def test_a_reopened_workbook_s_report_file_row_is_read_from_the_store_on_the_disk_thread(tmp_path, monkeypatch,
                                                                                         code_changed):
    """A row naming its report file, in a workbook opened again: its result, kept on disk by its input (the
    file by its stamp), is read on the disk thread, and nothing else (no text loaded, no answer read); after
    an upgrade of the code (another ``source_digest``) the file's text comes from the store of texts and its
    answer from the cache, both read on the disk thread. The cell's thread reads no disk (a stat of the file
    only), and the cell shows its value on its first call, no reader process started."""
    from xladdin.core import resolver
    from xladdin.core.cache import Cache as CacheClass

    book, row = report_book(tmp_path)

    first = file_session(tmp_path)
    try:  # the first session: the file read by a reader process, its answer cached (no rewrite: the call waits)
        assert udfs.QWEN_SCREEN([row], False, None, Caller("$L$2", book=book))[0][0] == "688001.SH"
    finally:
        udfs.set_runtime(None)
        first.close()

    store: list[tuple[str, str]] = []
    get_document = CacheClass.get_document

    def reading(self, key):
        store.append((key.partition(":")[0], threading.current_thread().name))
        return get_document(self, key)

    monkeypatch.setattr(CacheClass, "get_document", reading)
    if code_changed:
        monkeypatch.setattr(resolver, "source_digest", lambda: "another version")
    disk = record_disk(monkeypatch)
    recalculated = Recalculated()
    rt = file_session(tmp_path, recalculated)
    try:
        shown = udfs.QWEN_SCREEN([row], False, None, Caller("$L$2", book=book))[0]
        assert shown[0] == "688001.SH" and shown[functions.SPILL_FIELDS.index("reason")] == "经营稳健"  # at once
        assert recalculated == [] and rt.pending_cells == 0 and rt.batcher.engine.calls == []
        assert rt.batcher.reader.files_read == 0  # no file parsed again
        assert threads([("", "", t) for _, t in store]) == {DISK_THREAD}, store  # the store's reads
        if code_changed:  # the kept result is another code's: the text from the store, the answer's one read
            assert (rt.batcher.reader.from_store, rt.batcher.stats.recalled) == (1, 0)
            assert [kind for kind, _ in store] == ["result", "stamp", "readings", "text"], store
            assert len(disk) == 1 and threads(disk) == {DISK_THREAD}, disk
        else:  # the result kept by its input: no text loaded, no answer read
            assert (rt.batcher.reader.from_store, rt.batcher.stats.recalled) == (0, 1)
            assert [kind for kind, _ in store] == ["result"] and disk == [], (store, disk)
    finally:
        udfs.set_runtime(None)
        rt.close()


def test_a_report_text_is_handed_to_its_rows_off_the_disk_thread(tmp_path, monkeypatch):
    """A report file's text, read by a reader process (first session) or found in the store (the workbook
    opened again): its row's request is prepared on the batcher's rows thread, never on the disk thread
    (another row's read would wait behind a whole report's excerpt and readings), the loop, nor the thread
    that serves the reader processes; the reopened cell still shows its value on its first call."""
    book, row = report_book(tmp_path)
    prepared: list[str] = []
    prepare = Batcher.prepare

    def recorded(self, task, inp):
        if getattr(inp, "report_file", None):
            prepared.append(threading.current_thread().name)
        return prepare(self, task, inp)

    monkeypatch.setattr(Batcher, "prepare", recorded)
    from xladdin.core import resolver

    version = ["first"]  # the code upgraded before the workbook is opened again: its kept result not used
    monkeypatch.setattr(resolver, "source_digest", lambda: version[0])
    for reopened in (False, True):
        version[0] = "another" if reopened else "first"
        recalculated = Recalculated() if reopened else None
        rt = file_session(tmp_path, recalculated)
        try:
            shown = udfs.QWEN_SCREEN([row], False, None, Caller("$L$2", book=book))[0]
            assert shown[functions.SPILL_FIELDS.index("reason")] == "经营稳健"
            assert (rt.batcher.reader.files_read, rt.batcher.reader.from_store) == ((0, 1) if reopened else (1, 0))
        finally:
            udfs.set_runtime(None)
            rt.close()
        assert recalculated in (None, [])  # reopened: the value on the first call
    assert len(prepared) == 2 and threads([("", "", t) for t in prepared]) == {"xladdin-rows"}, prepared


def test_reads_still_queued_when_the_batcher_closes_are_their_rows_errors(tmp_path, monkeypatch):
    """Ctrl-C (or Excel closing) while the disk thread still has reads queued: each that misses is its row's
    error ("closed before the answer arrived"), never a request handed to a loop that has stopped, whose
    caller would wait for ever."""
    engine = ScriptedEngine(lambda _: screen_answer("经营稳健"))
    batcher = Batcher(engine, Cache(tmp_path / "c"), window_ms=0)
    batcher.start()
    release = threading.Event()
    store = batcher.cache._dc
    real = store.get

    def held(key, *args, **kwargs):
        release.wait(30)
        return real(key, *args, **kwargs)

    monkeypatch.setattr(store, "get", held)
    task = ScreenTask()
    fates = [batcher.load(task, task.parse({"code": 600000 + i, "name": f"公司{i}"})) for i in range(5)]
    closing = threading.Thread(target=batcher.close, kwargs={"abort": True})
    closing.start()
    time.sleep(0.3)  # close has stopped the loop and waits for the disk thread
    release.set()
    closing.join(30)
    assert not closing.is_alive()
    done, _ = concurrent.futures.wait(fates, timeout=10)
    assert len(done) == len(fates), "a row read after the close waits for ever"
    assert all("closed before the answer arrived" in str(t.exception()) for t in fates)
    assert engine.calls == []


def test_a_reader_that_will_not_end_still_stops_the_engine_and_the_threads(tmp_path, monkeypatch):
    """Closing while a reader process will not end (or a second Ctrl-C while close waits for it): the error
    comes out, and the engine is still closed and the batcher's threads stopped, none left running."""
    from xladdin.core.readers import Reader

    def stuck(self):
        raise KeyboardInterrupt

    before = set(threading.enumerate())
    engine = ScriptedEngine(lambda _: screen_answer("经营稳健"))
    batcher = Batcher(engine, Cache(tmp_path / "c"), window_ms=0, own_engine=True)
    batcher.start()
    batcher.disk.submit(lambda: None).result()
    ours = {t for t in threading.enumerate() if t.name.startswith(("xladdin-batcher", DISK_THREAD))} - before
    assert len(ours) == 2, ours  # its loop thread and its disk thread
    monkeypatch.setattr(Reader, "close", stuck)
    with pytest.raises(KeyboardInterrupt):
        batcher.close(abort=True)
    assert engine.closed
    assert wait_until(lambda: not any(t.is_alive() for t in ours)), ours


def test_closing_while_a_stored_text_is_found_makes_the_row_its_error_and_leaves_no_thread(tmp_path, monkeypatch):
    """Excel closes the workbook while the disk thread is finding a report file's text in the store: the row is
    its error ("the run ended first"), and no texts thread is started again after the close (the text is
    never handed to rows the close has failed)."""
    from xladdin.core import resolver
    from xladdin.core.readers import Reader

    book, row = report_book(tmp_path)
    version = ["first"]
    monkeypatch.setattr(resolver, "source_digest", lambda: version[0])
    first = file_session(tmp_path)
    try:  # the file read, its text stored
        assert udfs.QWEN_SCREEN([row], False, None, Caller("$L$2", book=book))[0][0] == "688001.SH"
    finally:
        udfs.set_runtime(None)
        first.close()
    version[0] = "another"  # the code upgraded: the result kept by the first is not used, the text is found
    looking, closed, jobs = threading.Event(), threading.Event(), []
    real_look, real_keep, real_close = Reader._look, Reader._keep, Reader.close

    def look(self, job):
        jobs.append(job)
        return real_look(self, job)

    def keep(self, stamp, text):  # the text found on the disk thread: held there until the reader has closed
        if threading.current_thread().name.startswith(DISK_THREAD):
            looking.set()
            closed.wait(10)
        return real_keep(self, stamp, text)

    def close(self):
        real_close(self)
        closed.set()

    for name, fn in (("_look", look), ("_keep", keep), ("close", close)):
        monkeypatch.setattr(Reader, name, fn)
    before = set(threading.enumerate())
    rt = file_session(tmp_path, Recalculated())
    try:
        udfs.QWEN_SCREEN([row], False, None, Caller("$L$2", book=book))
        assert looking.wait(10)
    finally:
        udfs.set_runtime(None)
        rt.close()
    assert len(jobs) == 1 and jobs[0].future.done()
    assert "ended first" in str(jobs[0].future.exception())
    started = {t for t in threading.enumerate() if t.name.startswith("xladdin-texts")} - before
    assert not started, started  # the texts thread closed, and not started again


def test_a_request_on_the_loop_as_the_batcher_closes_is_its_row_s_error(tmp_path, monkeypatch):
    """A request whose coroutine waits for its disk read just as the batcher closes (Ctrl-C): ended with what
    the loop holds (its row's error), never handed to a new loop the close has not stopped, where its row
    would wait for ever; a request made once the close has begun starts nothing."""
    from xladdin.core.threads import LoopThread

    engine = ScriptedEngine(lambda _: screen_answer("经营稳健"), delay=30)
    batcher = Batcher(engine, Cache(tmp_path / "c"), window_ms=0)
    batcher.start()
    stopping = threading.Event()
    real_stop, real_get = LoopThread.stop, Cache.get

    def stop(self, *args, **kwargs):
        stopping.set()
        return real_stop(self, *args, **kwargs)

    def get(self, key):  # the read held until the close has begun (or 1 s on)
        stopping.wait(1)
        return real_get(self, key)

    monkeypatch.setattr(LoopThread, "stop", stop)
    monkeypatch.setattr(Cache, "get", get)
    task = ScreenTask()
    fate = batcher.load(task, task.parse({"code": 600000, "name": "公司0"}))
    time.sleep(0.2)  # its coroutine waits for its read
    closing = threading.Thread(target=batcher.close, kwargs={"abort": True})
    closing.start()
    stopping.wait(10)
    during = batcher.load(task, task.parse({"code": 600001, "name": "公司1"}))
    closing.join(30)
    assert not closing.is_alive()
    assert wait_until(fate.done, timeout=10), "the row waits for ever"
    assert fate.cancelled() or "closed before the answer arrived" in str(fate.exception())
    assert "closed before the answer arrived" in str(during.exception(timeout=5))
    assert batcher.loop.loop is None  # no loop started again after the close


def test_a_batcher_used_again_after_close_answers_and_a_call_during_close_starts_nothing(tmp_path):
    """A call that reaches a batcher while it closes is its row's error and starts no loop nor engine again;
    the same batcher used once it has closed starts its engine and workers again and answers (its rows
    waited for ever: the old workers were gone, and it still said it was ready)."""
    engine = ScriptedEngine(lambda _: screen_answer("经营稳健"))
    batcher = Batcher(engine, Cache(tmp_path / "c"), window_ms=0)
    task = ScreenTask()
    batcher._closing = True  # as ``close`` sets it, before it stops the loop
    during = batcher.load(task, task.parse({"code": 600000, "name": "公司0"}))
    assert "closed before the answer arrived" in str(during.exception(timeout=5))
    assert batcher.loop.loop is None and not batcher.ready  # nothing started
    batcher._closing = False
    first = batcher.load(task, task.parse({"code": 600001, "name": "公司1"}))
    assert first.result(timeout=10).reason == "经营稳健"
    batcher.close()
    again = batcher.load(task, task.parse({"code": 600002, "name": "公司2"}))
    try:
        assert again.result(timeout=10).reason == "经营稳健"
        assert len(engine.calls) == 2
    finally:
        batcher.close()


def test_a_batcher_used_again_after_close_reads_report_files_again(tmp_path):
    """A workbook's batcher closed, then used again (a cell recalculated after it): a report file not read
    before is read by a reader process again and its row gets its value (before, its readers stayed closed
    and every such row was "not read (the run is ending)")."""
    from test_documents import PAGE_1, PAGE_2, make_pdf

    book, row = report_book(tmp_path)
    make_pdf(book.parent / "688002_年报.pdf", [PAGE_1, PAGE_2])  # another file: not read before
    rt = file_session(tmp_path)  # no recalculation: a cell waits for its value
    try:
        assert udfs.QWEN_SCREEN([row], False, None, Caller("$L$2", book=book))[0][0] == "688001.SH"
        rt.batcher.close()
        second = [688002.0, "华兴二号", "设备", -40.0, None, None, "688002_年报.pdf"]
        value = udfs.QWEN_SCREEN([second], False, None, Caller("$L$3", book=book))[0]
        assert value[0] == "688002.SH" and value[functions.SPILL_FIELDS.index("reason")] == "经营稳健", value
        assert rt.batcher.reader.files_read == 2
    finally:
        udfs.set_runtime(None)
        rt.close()


def test_a_file_asked_for_before_a_close_is_that_run_s_and_never_read_after_it(tmp_path, monkeypatch):
    """A file asked for, still being looked up in the store on the disk thread when the reader closes: its
    row is the close's error, and once the reader is used again the old lookup sends nothing to a reader
    nor takes the place of the new run's request for the same file, which gets its text, read once."""
    from xladdin.core import readers
    from xladdin.core.threads import SerialThread

    path = report_file(tmp_path)
    looking, reopened = threading.Event(), threading.Event()
    real_stored = readers.Reader._stored

    def stored(self, stamp):  # the first lookup held until the reader has closed and been used again
        if not looking.is_set():
            looking.set()
            reopened.wait(10)
        return real_stored(self, stamp)

    monkeypatch.setattr(readers.Reader, "_stored", stored)
    cache, disk = Cache(tmp_path / "c"), SerialThread()
    reader = readers.Reader(cache, disk=disk)
    try:
        _, old = reader.text(path)
        assert looking.wait(10)
        reader.close()
        assert "ended first" in str(old.exception(timeout=5))
        reader.reopen()
        _, new = reader.text(path)  # queued on the disk thread behind the old lookup
        reopened.set()
        assert new.result(60).strip() and reader.files_read == 1
        assert reader.snapshot()["files_reading"] == 0
    finally:
        reopened.set()
        reader.close()
        disk.close()
        cache.close()


@pytest.mark.slow
def test_a_reader_closed_while_its_thread_is_slow_to_end_reads_again_once_reopened(tmp_path, monkeypatch):
    """The readers' thread still starting a reader process when the reader closes (longer than the close waits
    for it): reopened, the reader reads the next file on a thread of its own (before, it stayed closed for
    good), and the late thread ends the process it started."""
    from xladdin.core import readers

    a, b = report_file(tmp_path, "a.pdf"), report_file(tmp_path, "b.pdf")
    real_spawn, spawning, late = readers.Reader._spawn, threading.Event(), []

    def spawn(self, n=1):
        if spawning.is_set():
            return real_spawn(self, n)
        spawning.set()  # the first reader process starts slowly: 6 s, the close waits 5
        time.sleep(6)
        late.extend(real_spawn(self, n))
        return late

    monkeypatch.setattr(readers.Reader, "_spawn", spawn)
    cache = Cache(tmp_path / "c")
    reader = readers.Reader(cache)
    try:
        _, first = reader.text(a)
        assert spawning.wait(10)
        reader.close()
        assert "ended first" in str(first.exception(timeout=5))
        reader.reopen()
        assert reader.read_now(b).strip()
        assert wait_until(lambda: late and late[0].process.poll() is not None, timeout=15)  # ended by its thread
        assert reader.files_read == 1
    finally:
        reader.close()
        cache.close()


@pytest.mark.slow
def test_a_reader_ended_by_a_close_is_no_error_of_its_file_for_the_next_run(tmp_path, monkeypatch):
    """The readers' thread about to take a reader's answer when the reader closes (and is reopened): the close
    ends that reader, which the late thread sees as a crash; that is no fact about the file, whose next
    request is read (before, it was "crashed the report reader" for 30 s without being read)."""
    from xladdin.core import readers

    path = report_file(tmp_path, "a.pdf")
    entered, go, real_answer = threading.Event(), threading.Event(), readers.Reader._answer

    def answer(self, w):  # the first answer taken only once the reader has closed and reopened
        if not entered.is_set():
            entered.set()
            go.wait(10)
        return real_answer(self, w)

    monkeypatch.setattr(readers.Reader, "_answer", answer)
    cache = Cache(tmp_path / "c")
    reader = readers.Reader(cache)
    try:
        _, old = reader.text(path)
        assert entered.wait(30)
        reader.close()
        reader.reopen()
        go.set()
        assert "ended first" in str(old.exception(timeout=5))
        time.sleep(0.5)  # the late thread has taken its dead reader's end
        assert reader.read_now(path).strip()
    finally:
        go.set()
        reader.close()
        cache.close()


def test_a_report_file_asked_for_while_the_batcher_closes_is_its_row_s_error_and_starts_no_reader(tmp_path,
                                                                                                  monkeypatch):
    """A cell recalculated while its workbook's batcher closes asks for a report file: the row is its error
    ("the run is ending") and no reader thread or process is left once the close has returned."""
    from xladdin.core.threads import LoopThread

    path = report_file(tmp_path)
    batcher = Batcher(ScriptedEngine(lambda _: screen_answer("经营稳健")), Cache(tmp_path / "c"), window_ms=0)
    batcher.start()
    asked = []
    real_stop = LoopThread.stop

    def stop(self, *args, **kwargs):  # the batcher's readers are closed, its loop not yet stopped
        try:
            asked.append(batcher.reader.read_now(path))
        except Exception as e:
            asked.append(e)
        return real_stop(self, *args, **kwargs)

    monkeypatch.setattr(LoopThread, "stop", stop)
    before = set(threading.enumerate())
    batcher.close()
    assert len(asked) == 1 and "the run is ending" in str(asked[0]), asked
    started = {t for t in threading.enumerate() if t.name.startswith(("xladdin-readers", "xladdin-texts"))} - before
    assert not started, started
    assert batcher.reader.files_read == 0


def test_a_report_text_damaged_in_the_store_is_read_from_the_file_again(tmp_path, monkeypatch):
    """The store's compressed text of a file cannot be read back (a damaged entry): the file is read again by
    a reader, and the row gets its value (before, the row waited for ever)."""
    from test_documents import PAGE_1, PAGE_2, make_pdf

    from xladdin.core import readers
    from xladdin.reading.documents import ReportPath, Reports

    report = tmp_path / "688001_年报.pdf"
    make_pdf(report, [PAGE_1, PAGE_2])
    cache = Cache(tmp_path / "c")
    allowed = Reports((tmp_path.resolve(),))
    first = readers.Reader(cache)
    try:
        text = first.read_now(ReportPath(str(report), allowed))
    finally:
        first.close()
    digest = cache.get_document("stamp:" + readers.on_disk(readers.stamp_of(ReportPath(str(report), allowed))))
    cache.set_document("text:" + digest, b"not zlib")  # damaged
    from xladdin.core.threads import SerialThread

    disk = SerialThread()
    again = readers.Reader(cache, disk=disk)
    try:
        _, future = again.text(ReportPath(str(report), allowed))
        assert future.result(60) == text and again.files_read == 1
    finally:
        again.close()
        disk.close()
        cache.close()


def test_a_reader_thread_that_will_not_start_is_its_file_s_error_and_the_next_file_is_read(tmp_path, monkeypatch):
    """No thread to be had for the readers (the process at its limit): the file asked for is its row's error
    naming it, and once threads can be had the next file is read (before, the error escaped to the caller and
    every later file waited on a thread that never ran)."""
    from xladdin.core import readers

    a, b = report_file(tmp_path, "a.pdf"), report_file(tmp_path, "b.pdf")
    real_start, refused = threading.Thread.start, []

    def start(self):
        if self.name == "xladdin-readers" and not refused:
            refused.append(self)
            raise RuntimeError("can't start new thread")
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    cache = Cache(tmp_path / "c")
    reader = readers.Reader(cache)
    try:
        _, first = reader.text(a)
        error = first.exception(timeout=5)
        assert "a.pdf: not read (the report readers failed: RuntimeError: can't start new thread)" in str(error)
        _, second = reader.text(b)
        assert second.result(timeout=60).strip() and reader.files_read == 1
    finally:
        reader.close()
        cache.close()


def test_an_answer_s_write_goes_ahead_of_the_reads_queued_before_it():
    """On the disk thread, what is given ``first`` (a batcher's answers to store) runs before the reads
    that were queued before it and have not started; the rest keeps its order."""
    from xladdin.core.threads import SerialThread

    disk, ran, release = SerialThread(), [], threading.Event()
    try:
        busy = disk.submit(release.wait, 30)  # the thread busy with one read
        reads = [disk.submit(ran.append, f"read {i}") for i in range(3)]
        write = disk.submit(ran.append, "write", first=True)
        release.set()
        for f in (busy, *reads, write):
            f.result(30)
        assert ran == ["write", "read 0", "read 1", "read 2"]
    finally:
        release.set()
        disk.close()


def test_the_readers_the_waiting_files_need_start_together(tmp_path, monkeypatch):
    """Files asked for in one burst, with two readers allowed: the first file waits a moment (``GATHER_S``)
    for the others, and the readers they need are started in one go (each connecting back with its own
    token), not one after another's start-up; each file is read."""
    from xladdin.core import readers

    files = [report_file(tmp_path, f"{i}.pdf") for i in range(3)]
    real_spawn, asked = readers.Reader._spawn, []

    def spawn(self, n=1):
        asked.append(n)
        return real_spawn(self, n)

    monkeypatch.setattr(readers.Reader, "_spawn", spawn)
    monkeypatch.setattr(readers, "GATHER_S", 2.0)  # the burst's three asks fit in it on a loaded machine too
    cache = Cache(tmp_path / "c")
    reader = readers.Reader(cache, processes=2)
    try:
        futures = [reader.text(f)[1] for f in files]
        texts = [f.result(120) if not isinstance(f, str) else f for f in futures]
        assert all(t.strip() for t in texts) and reader.files_read == 3
        assert asked == [2], asked  # both readers at once, none started later for the third file
    finally:
        reader.close()
        cache.close()
