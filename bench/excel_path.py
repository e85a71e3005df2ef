"""The Excel path against the CLI on the same rows and the same stand-in server (``python -m bench excel_path``).

Desktop Excel calls ``QWEN_SCREEN`` once per cell with its caller; a pending cell shows its
placeholder and is recalculated when its answer arrives (the runtime's recalculation callback, on
Excel's own thread). Here that thread is a loop that recalculates each cell it is handed. The CLI
arm is ``screen_file`` on a CSV of the same rows. Both reach ``bench/answer_server.py`` (answers
after 10-50 ms, in its own process) with a fresh cache each; the time is until every cell (every
report row) holds its verdict. Results: ``bench/results/excel_path.json``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import multiprocessing
import queue
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xladdin import collector
from xladdin.core.batcher import Batcher
from xladdin.excel import udfs
from xladdin.jobs.pool_screen import screen_file
from xladdin.settings import Settings
from xladdin.sheet import functions
from xladdin.sheet.functions import CellRuntime
from xladdin.tasks import ScreenTask

from .common import RESULTS, machine, rows, write_run

HEADLINE = ('cli_over_excel',)  # the numbers docs/BENCHMARKS.md gives for each earlier run

HEADER = ["代码", "名称", "行业", "市盈率TTM", "ROE", "每股收益", "财报摘要"]
FIELDS = ["code", "name", "industry", "pe_ttm", "roe", "eps", "report_text"]


class Caller:
    """What xlwings passes as ``caller``: the cell's address and its sheet's book."""

    def __init__(self, address: str):
        self.address = address
        self.sheet = type("Sheet", (), {"name": "Pool", "book": type("Book", (), {"name": "bench.xlsx"})()})()


def _server(low: float, high: float) -> tuple[Any, str]:
    from .answer_server import serve

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    port = sock.getsockname()[1]
    proc = multiprocessing.get_context("fork").Process(target=serve, args=(sock, low, high, 7), daemon=True)
    proc.start()  # before any client thread exists
    sock.close()
    return proc, f"http://127.0.0.1:{port}/v1"


def _settings(url: str, workdir: Path, name: str) -> Settings:
    return Settings.load({"engine_url": url, "cache_dir": workdir / f"{name}-cache"}, env={})


def write_pool(pool: Path, data: list[dict[str, Any]]) -> Path:
    """``data``'s rows as a pool CSV with the CLI's headers."""
    with pool.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows([r[k] for k in FIELDS] for r in data)
    return pool


def cli(url: str, workdir: Path, data: list[dict[str, Any]]) -> dict[str, Any]:
    """``xladdin screen``'s path (``screen_file``) on the rows, with the garbage collector as its command sets it
    for the whole run (``collector``), as the cell doors' runtimes set it for theirs."""
    pool = write_pool(workdir / "pool.csv", data)
    t0 = time.perf_counter()
    with collector.relaxed():
        summary = screen_file(pool, workdir / "report.csv", _settings(url, workdir, "cli"), progress=False)
    return {"rows": summary.rows, "seconds": round(time.perf_counter() - t0, 3), "errors": summary.errors}


def excel(url: str, workdir: Path, data: list[dict[str, Any]]) -> dict[str, Any]:
    recalc: queue.SimpleQueue[Any] = queue.SimpleQueue()
    runtime = CellRuntime(batcher=Batcher.from_settings(_settings(url, workdir, "excel")),
                          told=lambda settled: recalc.put(settled.result().caller))
    udfs.set_runtime(runtime)
    values = [[r[k] for k in FIELDS] for r in data]
    callers = [Caller(f"$H${i + 2}") for i in range(len(data))]
    try:
        t0 = time.perf_counter()
        sheet = fill(values, callers, recalc)
        seconds = time.perf_counter() - t0
        engine_requests = runtime.batcher.snapshot()["engine_requests"]
        final, calls = sheet.final, sheet.calls
    finally:
        udfs.set_runtime(None)
        runtime.close()
    errors = sum(str(v[0]).startswith("#QWEN") for v in final.values())
    return {"rows": len(final), "seconds": round(seconds, 3), "errors": errors, "udf_calls": calls,
            "engine_requests": engine_requests}


@dataclass
class Sheet:
    """A sheet filled as Excel fills it: each cell's final value, the UDF calls, and the time spent in
    them on Excel's thread (the first pass, and in all)."""

    final: dict[int, Any]
    calls: int
    first_pass_s: float
    calling_s: float


def fill(values: list[list[Any]], callers: list[Any], recalc: queue.SimpleQueue) -> Sheet:
    """``QWEN_SCREEN`` for each row with its caller (the sheet calculated once), then each cell the
    runtime hands back recalculated, until every cell holds its value."""
    row_of = {c.address: i for i, c in enumerate(callers)}
    final: dict[int, Any] = {}
    calls, calling, first_pass = 0, 0.0, 0.0

    def call(i: int, caller: Any) -> None:
        nonlocal calls, calling
        t = time.perf_counter()
        out = udfs.QWEN_SCREEN([values[i]], False, None, caller)[0]
        calling += time.perf_counter() - t
        calls += 1
        if out[0] != functions.PENDING:
            final[i] = out

    for i, caller in enumerate(callers):
        call(i, caller)
    first_pass = calling
    while len(final) < len(values):  # Excel's thread: each cell it is asked to recalculate
        caller = recalc.get(timeout=600)
        call(row_of[caller.address], caller)
    return Sheet(final, calls, first_pass, calling)


def side_by_side(arms: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Arms (name → function of a fresh work folder) run in their order, then in the reverse order
    (each first once and last once); every run printed as it ends. Returns the runs and each arm's
    best seconds."""
    runs = []
    for order in (list(arms), list(arms)[::-1]):
        for arm in order:
            with tempfile.TemporaryDirectory() as work:
                runs.append({"arm": arm, **arms[arm](Path(work))})
            print(json.dumps(runs[-1]), flush=True)
    return runs, {arm: min(r["seconds"] for r in runs if r["arm"] == arm) for arm in arms}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench excel_path", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--delay-ms", default="10,50", help="the stand-in server's answer delay, low,high")
    p.add_argument("--out", default=str(RESULTS / "excel_path.json"))
    args = p.parse_args(argv)
    against_cli("excel", excel, args.rows, args.delay_ms, args.out, "Excel path")
    return 0


def on_stand_in(arms: dict[str, Any], rows_n: int, delay_ms: str, seed: int = 900) -> tuple[dict[str, Any],
                                                                                            dict[str, float]]:
    """Each arm (``arm(url, work, data)``) side by side on the same ``rows_n`` rows and the stand-in server
    (answers after ``delay_ms`` "low,high"): the run's record (task version, rows, server, machine, runs)
    and each arm's best seconds."""
    low, high = (float(x) / 1000 for x in delay_ms.split(","))
    data = rows(rows_n, seed=seed)
    server, url = _server(low, high)
    try:
        runs, best = side_by_side({name: functools.partial(arm, url, data=data) for name, arm in arms.items()})
    finally:
        server.kill()
        server.join()
    return {"task_version": ScreenTask.version, "rows": rows_n, "server": f"bench/answer_server.py, {delay_ms} ms",
            "machine": machine(), "runs": runs}, best


def against_cli(name: str, arm: Any, rows_n: int, delay_ms: str, out_path: str, label: str) -> dict[str, Any]:
    """``arm(url, work, data)`` beside the CLI on the same rows and the stand-in server (answers after
    ``delay_ms`` "low,high"), side by side; the results, with ``cli_over_NAME``, written to ``out_path``."""
    out, best = on_stand_in({"cli": cli, name: arm}, rows_n, delay_ms)
    ratio = f"cli_over_{name}"
    out[ratio] = round(best["cli"] / best[name], 3)
    write_run(out_path, out)
    print(f"{label} at {out[ratio]} of the CLI's speed ({rows_n} rows, best of two each)")
    return out


def render(d: dict[str, Any]) -> list[str]:
    """Section 10 of docs/BENCHMARKS.md."""
    lines = ["## 10. The Excel path against the CLI (`python -m bench excel_path`)", "",
             f"{d['rows']} rows, the same rows and the same stand-in server ({d['server']}), a fresh cache per run; "
             "the Excel arm calls `QWEN_SCREEN` per cell with its caller and recalculates each cell the runtime "
             "hands back, until every cell holds its verdict. One run on "
             f"{d['machine'].get('cpus')} CPUs, each arm first once and second once.", "",
             "| arm | seconds | errors | UDF calls | engine requests |", "|---|---|---|---|---|"]
    for r in d["runs"]:
        lines.append(f"| {r['arm']} | {r['seconds']} | {r['errors']} | {r.get('udf_calls', '')} "
                     f"| {r.get('engine_requests', '')} |")
    lines += ["", f"The Excel path runs at **{d['cli_over_excel']}** of the CLI's speed (best run of each)"
              + (f": {d['note']}." if d.get("note") else "."), ""]
    return lines
