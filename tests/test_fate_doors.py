"""The request-fate behaviours through both front doors (issue 29): Excel's (``udfs.QWEN_SCREEN`` with a
caller, the cell recalculated when its requests settle) and Calc's (``CalcFunctions.call``, a volatile
``Waiting`` settled by what LibreOffice's main thread runs). Each test body is door-agnostic:

- the cache off or unwritable: every cell reaches its verdict, one engine request per distinct row,
  no cell settled twice;
- the engine's model changed while a request is out: the cell shows why the answer is not stored,
  nothing is stored under the old model's key, and once the failure's time is over the row is asked
  again and stored under the new model's;
- an error counts for its time (30 s by default) without asking the engine again, then the row is
  asked again;
- one of two replicas (stand-in vLLM servers on 127.0.0.1) gone between recalculations: every cell
  still gets its verdict, from the other."""

from __future__ import annotations

import collections
import threading
import time

import pytest
from kit import Caller, cache_for, overloaded_while, recalculates

from xladdin.calc.runtime import CalcFunctions, Waiting
from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.excel import udfs
from xladdin.sheet import functions
from xladdin.sheet.functions import CellRuntime
from xladdin.testing import ScriptedEngine, screen_answer

DOORS = ["excel", "calc"]
BOUND = 20.0  # seconds any wait may take before the test fails


def row(i: int) -> list:
    """A row in QWEN_SCREEN's positional order: 代码 名称 行业 市盈率TTM ROE 每股收益 财报摘要."""
    return [600000.0 + i, f"公司{i}", "行业", 20.0, 18.0, 1.0, f"营业收入{100 + i}亿元"]


def code(i: int) -> str:
    return f"{600000 + i}.SH"  # the spilled row's first column


class Door:
    """A front door as a sheet sees it: one cell per distinct row. ``ask`` enters (or recalculates) the
    row's cell and gives the value it shows; ``settle`` waits for the cells whose requests settle and
    does what the spreadsheet then does; ``shown`` is a cell's value now; ``value`` recalculates it.
    ``settled`` counts, per cell, the times it was settled (recalculated by Excel, told by Calc)."""

    runtime: CellRuntime

    def __init__(self):
        self.shown: dict[tuple, list] = {}
        self.settled: collections.Counter = collections.Counter()

    def ask(self, values: list) -> list:
        raise NotImplementedError

    def settle(self, n: int, timeout: float = BOUND) -> None:
        raise NotImplementedError

    def value(self, values: list) -> list:
        return self.ask(values)

    def waiting(self) -> int:
        """Settles notified but not yet run (none once a sheet is calm)."""
        raise NotImplementedError

    def verdict(self, values: list) -> list:
        """The cell's value once its requests (if any) have settled."""
        first = self.ask(values)
        if first[0] == functions.PENDING:
            self.settle(1)
            return self.shown[tuple(values)]
        return first

    def close(self) -> None:
        raise NotImplementedError


class ExcelDoor(Door):
    """Desktop Excel: ``QWEN_SCREEN(rows, False, None, caller)``; the runtime's ``rewrite(caller)`` (on the
    engine's thread) asks for the cell's recalculation, which ``settle`` then does (Excel's COM loop)."""

    def __init__(self, batcher: Batcher):
        super().__init__()
        self._cond = threading.Condition()
        self._rewrites: list[Caller] = []
        self._callers: dict[tuple, Caller] = {}
        self._rows: dict[str, tuple] = {}
        self.runtime = CellRuntime(batcher=batcher, told=recalculates(self._rewrite))
        udfs.set_runtime(self.runtime)

    def _rewrite(self, caller: Caller) -> None:
        with self._cond:
            self._rewrites.append(caller)
            self._cond.notify_all()

    def _caller(self, key: tuple) -> Caller:
        if key not in self._callers:
            caller = self._callers[key] = Caller(f"$L${len(self._callers) + 2}")
            self._rows[caller.address] = key
        return self._callers[key]

    def ask(self, values: list) -> list:
        key = tuple(values)
        out = udfs.QWEN_SCREEN([list(values)], False, None, self._caller(key))
        assert len(out) == 1 and len(out[0]) == len(functions.SPILL_FIELDS), out
        self.shown[key] = out[0]
        return out[0]

    def settle(self, n: int, timeout: float = BOUND) -> None:
        deadline = time.monotonic() + timeout
        done = 0
        while done < n:
            with self._cond:
                while not self._rewrites:
                    left = deadline - time.monotonic()
                    assert left > 0, f"{done} of {n} cells recalculated within {timeout:g} s"
                    self._cond.wait(left)
                callers, self._rewrites = self._rewrites, []
            for caller in callers:  # Excel recalculates each cell asked for
                key = self._rows[caller.address]
                self.settled[key] += 1
                self.ask(list(key))
                done += 1

    def waiting(self) -> int:
        with self._cond:
            return len(self._rewrites) + self.runtime.pending_cells

    def close(self) -> None:
        udfs.set_runtime(None)
        self.runtime.close()


class CellListener:
    """A Calc cell listening to a volatile result: it shows what it is told."""

    def __init__(self, door: CalcDoor, key: tuple):
        self.door, self.key, self.added = door, key, False

    def modified(self, value) -> None:
        if self.added:  # told a settled value (the first telling is the value at registration)
            self.door.settled[self.key] += 1
        self.added = True
        assert len(value) == 1 and len(value[0]) == len(functions.SPILL_FIELDS), value
        self.door.shown[self.key] = value[0]


class CalcDoor(Door):
    """LibreOffice Calc: ``CalcFunctions.call("QWEN_SCREEN", (row, None, None))`` gives a ``Waiting`` the
    cell listens to; ``post`` records the settle function LibreOffice's main thread would run, which
    ``settle`` runs."""

    def __init__(self, batcher: Batcher):
        super().__init__()
        self._cond = threading.Condition()
        self._posted: list = []
        self._results: dict[tuple, tuple[Waiting, CellListener]] = {}
        self.functions = CalcFunctions(lambda: Waiting(lambda source, value: value), self._post, batcher=batcher)
        self.runtime = self.functions.runtime()

    def _post(self, fn) -> None:
        with self._cond:
            self._posted.append(fn)
            self._cond.notify_all()

    def ask(self, values: list) -> list:
        key = tuple(values)
        result = self.functions.call("QWEN_SCREEN", ((tuple(values),), None, None))
        held = self._results.get(key)
        if held is None or held[0] is not result:  # a new result: the cell listens to it instead
            if held is not None:
                held[0].removeResultListener(held[1])
            listener = CellListener(self, key)
            self._results[key] = (result, listener)
            result.addResultListener(listener)  # told the value now
        assert self.shown[key] == result.value[0]
        return result.value[0]

    def result(self, values: list) -> Waiting:
        return self._results[tuple(values)][0]

    def settle(self, n: int, timeout: float = BOUND) -> None:
        deadline = time.monotonic() + timeout
        target = sum(self.settled.values()) + n
        while sum(self.settled.values()) < target:
            with self._cond:
                while not self._posted:
                    left = deadline - time.monotonic()
                    assert left > 0, (f"{n - target + sum(self.settled.values())} of {n} cells settled "
                                      f"within {timeout:g} s")
                    self._cond.wait(left)
                posted, self._posted = self._posted, []
            for fn in posted:  # LibreOffice's main thread runs each settle posted
                fn()

    def waiting(self) -> int:
        with self._cond:
            return len(self._posted) + self.runtime.pending_cells

    def close(self) -> None:
        self.functions.close()


def open_door(kind: str, batcher: Batcher) -> Door:
    return ExcelDoor(batcher) if kind == "excel" else CalcDoor(batcher)


@pytest.fixture
def doors():
    """Opens doors (``doors(kind, batcher)``) and closes every one at the test's end."""
    opened: list[Door] = []

    def make(kind: str, batcher: Batcher) -> Door:
        door = open_door(kind, batcher)
        opened.append(door)
        return door

    yield make
    for door in reversed(opened):
        door.close()


def asked_texts(engine: ScriptedEngine) -> list[str]:
    """The report text of each engine request (the row it was for)."""
    out = []
    for messages in engine.calls:
        text = "\n".join(m["content"] for m in messages)
        out.extend(f"营业收入{100 + i}亿元" for i in range(1000) if f"营业收入{100 + i}亿元" in text)
    return out


@pytest.mark.parametrize("cache", ["off", "unwritable"])
@pytest.mark.parametrize("door", DOORS)
def test_without_a_disk_cache_every_cell_reaches_its_verdict_once(door, cache, tmp_path, doors):
    n = 100
    engine = ScriptedEngine(lambda _: screen_answer("经营稳健"), delay=0.01, max_parallel=16)
    d = doors(door, Batcher(engine, cache_for(cache, tmp_path), window_ms=0))
    rows = [row(i) for i in range(n)]
    first = [d.ask(r)[0] for r in rows]
    assert first == [functions.PENDING] * n
    again = [d.ask(r)[0] for r in rows[:10]]  # recalculated while the requests may be out: joins them
    assert set(again) <= {functions.PENDING, *(code(i) for i in range(10))}, again
    d.settle(n)
    assert [d.shown[tuple(r)][0] for r in rows] == [code(i) for i in range(n)]  # each cell its verdict
    assert {d.shown[tuple(r)][functions.SPILL_FIELDS.index("risk_level")] for r in rows} == {"低"}
    final = [d.value(r) for r in rows]  # recalculated once more: the same values, from memory
    assert final == [d.shown[tuple(r)] for r in rows] and [f[0] for f in final] == [code(i) for i in range(n)]
    assert len(engine.calls) == n  # one request per distinct row, none asked again
    assert sorted(asked_texts(engine)) == sorted(r[6] for r in rows)
    assert set(d.settled.values()) == {1} and len(d.settled) == n  # each cell settled once: no loop
    time.sleep(0.1)
    assert d.waiting() == 0 and len(engine.calls) == n


@pytest.mark.parametrize("door", DOORS)
def test_a_model_change_mid_request_is_the_cell_s_error_then_asked_again_under_the_new_model(
        door, tmp_path, doors):
    engine = ScriptedEngine(lambda _: screen_answer("经营稳健"))

    def swapped(_):
        engine.model_id = "another-model"  # the server behind the engine was replaced mid-request
        return screen_answer("经营稳健")

    engine.respond = swapped
    cache = Cache(tmp_path / "c")
    d = doors(door, Batcher(engine, cache, window_ms=0))
    r = row(7)
    assert d.ask(r)[0] == functions.PENDING
    d.settle(1)
    shown = d.shown[tuple(r)][0]
    assert shown.startswith("#QWEN!") and "asked of scripted-model: the answer is not stored" in shown, shown
    assert len(engine.calls) == 1 and cache.stats()["entries"] == 0  # nothing stored under the old key
    assert d.value(r)[0] == shown and len(engine.calls) == 1  # within the failure's time: not asked again
    assert d.waiting() == 0

    d.runtime.resolver.error_ttl = 0  # the failure's time is over
    engine.respond = lambda _: screen_answer("经营稳健")
    assert d.ask(r)[0] == functions.PENDING  # asked again
    d.settle(1)
    assert d.shown[tuple(r)][0] == code(7) and len(engine.calls) == 2
    assert d.value(r)[0] == code(7) and len(engine.calls) == 2
    assert cache.stats()["entries"] == 1
    assert set(d.settled.values()) == {2}  # settled once per request

    # the workbook opened again: the answer is under the new model's key, none under the old one's
    new = ScriptedEngine(lambda _: pytest.fail("asked although cached"), model_id="another-model")
    assert doors(door, Batcher(new, Cache(tmp_path / "c"), window_ms=0)).verdict(r)[0] == code(7)
    assert new.calls == []
    old = ScriptedEngine(lambda _: screen_answer("经营稳健"), model_id="scripted-model")
    assert doors(door, Batcher(old, Cache(tmp_path / "c"), window_ms=0)).verdict(r)[0] == code(7)
    assert len(old.calls) == 1  # nothing was stored under the first model's key: asked


@pytest.mark.parametrize("door", DOORS)
def test_an_error_counts_for_its_time_then_the_row_is_asked_again(door, tmp_path, doors):
    fail = threading.Event()
    fail.set()

    engine = ScriptedEngine(overloaded_while(fail), delay=0.02)
    d = doors(door, Batcher(engine, Cache(tmp_path / "c", enabled=False), window_ms=0))
    assert d.runtime.resolver.error_ttl == 30.0  # an error's time, by default
    rows = [row(i) for i in range(3)]
    assert [d.ask(r)[0] for r in rows] == [functions.PENDING] * 3
    d.settle(3)
    errors = [d.shown[tuple(r)][0] for r in rows]
    assert all(e.startswith("#QWEN! engine error 503") for e in errors), errors
    asked = len(engine.calls)
    assert asked >= 3
    fail.clear()  # the engine would answer now, but the error counts for its time
    for _ in range(3):
        assert [d.value(r)[0] for r in rows] == errors
    time.sleep(0.1)
    assert len(engine.calls) == asked and d.waiting() == 0  # no new request, no cell waiting

    d.runtime.resolver.error_ttl = 0  # the failure's time is over: the next call asks again
    assert [d.ask(r)[0] for r in rows] == [functions.PENDING] * 3
    d.settle(3)
    assert [d.shown[tuple(r)][0] for r in rows] == [code(i) for i in range(3)]
    assert len(engine.calls) == asked + 3  # one new request per row
    assert [d.value(r)[0] for r in rows] == [code(i) for i in range(3)] and len(engine.calls) == asked + 3
    assert set(d.settled.values()) == {2}  # each cell settled once per request: the error, then its verdict
    if door == "calc":  # a verdict is final: Calc's recalculation gets the same result, computing nothing
        assert all(d.result(r).final for r in rows)


def chat_route(body: bytes):
    """A vLLM chat completion (the model ``qwen``) answering a valid screening."""
    import json

    data = {"id": "c", "object": "chat.completion", "created": 0, "model": "qwen",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": screen_answer("经营稳健")}}],
            "usage": {"completion_tokens": 5}}
    return 200, "application/json", json.dumps(data, ensure_ascii=False).encode()


@pytest.mark.parametrize("door", DOORS)
def test_a_replica_gone_between_recalculations_leaves_every_cell_its_verdict(door, tmp_path, doors):
    """Two stand-in vLLM servers (real HTTP on 127.0.0.1); one stops between two waves of cells: the
    second wave's cells get their verdicts from the other, and the one gone is named down."""
    from conftest import Server, tiny_settings, vllm_models

    routes = {"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": chat_route}
    a, b = Server(routes), Server(routes)
    gone = False
    try:
        settings = tiny_settings(tmp_path, engine_url=f"{a.url},{b.url}", retries=0, timeout=30, no_cache=True)
        batcher = Batcher.from_settings(settings)
        d = doors(door, batcher)
        first = [row(i) for i in range(4)]
        assert [d.ask(r)[0] for r in first] == [functions.PENDING] * 4
        d.settle(4)
        assert [d.shown[tuple(r)][0] for r in first] == [code(i) for i in range(4)]
        a.close()  # one replica goes away
        gone = True
        second = [row(i) for i in range(4, 16)]
        assert [d.ask(r)[0] for r in second] == [functions.PENDING] * 12
        d.settle(12)
        assert [d.shown[tuple(r)][0] for r in second] == [code(i) for i in range(4, 16)], \
            [d.shown[tuple(r)][0] for r in second]
        engine = batcher.engine
        assert 0 in engine.down and a.url in engine.describe(), engine.describe()
        assert sum(engine.answered) == 16 and engine.answered[1] >= 12, engine.answered
        assert set(d.settled.values()) == {1}
    finally:
        for server in (b,) if gone else (a, b):
            server.close()
