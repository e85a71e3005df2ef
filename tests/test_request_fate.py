"""Each request's fate reaches the cells that asked through its ticket, not through the disk: with the
cache off or unwritable, cells recalculated as desktop Excel does (a caller, recalculation when the
answer arrives) each get their final value, with one engine request per distinct row."""

from __future__ import annotations

import threading

import pytest

from xladdin.batcher import Batcher
from xladdin.cache import Cache
from xladdin.excel import cells, udfs
from xladdin.excel.pending import CellRuntime
from xladdin.testing import ScriptedEngine, screen_answer


class Caller:
    def __init__(self, address: str):
        self.address = address
        self.sheet = type("S", (), {"name": "Pool", "book": type("B", (), {"name": "t.xlsx"})()})()


def cache_for(kind: str, tmp_path) -> Cache:
    if kind == "off":
        return Cache(tmp_path / "cache", enabled=False)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    cache = Cache(blocker / "cache")  # unusable: degrades to no cache with a warning
    assert cache.warning and not cache.enabled
    return cache


@pytest.mark.parametrize("kind", ["off", "unwritable"])
def test_500_cells_reach_their_values_without_a_disk_cache(kind, tmp_path):
    engine = ScriptedEngine(lambda _: screen_answer("经营稳健"), delay=0.01, max_parallel=16)
    recalc: list[Caller] = []
    lock = threading.Lock()
    all_settled = threading.Event()
    n = 500

    def rewrite(caller: Caller) -> None:  # Excel recalculates the cell
        with lock:
            recalc.append(caller)
            if len(recalc) == n:
                all_settled.set()

    rt = CellRuntime(batcher=Batcher(engine, cache_for(kind, tmp_path), window_ms=0), rewrite=rewrite)
    udfs.set_runtime(rt)
    try:
        rows = [[600000.0 + i, f"公司{i}", "行业", 20.0, 18.0, 1.0, f"营业收入{100 + i}亿元"] for i in range(n)]
        callers = [Caller(f"$L${i + 2}") for i in range(n)]
        first = [udfs.QWEN_SCREEN([r], False, None, c)[0][0] for r, c in zip(rows, callers, strict=True)]
        assert first.count(cells.PENDING) == n
        assert all_settled.wait(60), len(recalc)
        final = [udfs.QWEN_SCREEN([r], False, None, c)[0] for r, c in zip(rows, callers, strict=True)]
        assert [f[0] for f in final] == [f"{600000 + i}.SH" for i in range(n)]  # every cell has its verdict
        assert {f[cells.SPILL_FIELDS.index("risk_level")] for f in final} == {"低"}
        assert len(engine.calls) == n  # one request per distinct row, none asked again
        assert len(recalc) == n  # each cell recalculated once: no loop
    finally:
        udfs.set_runtime(None)
        rt.close()
