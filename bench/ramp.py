"""How soon a table's requests reach the server (``python -m bench ramp``).

A pool through the CLI (``screen_file`` on a CSV, 1,024 requests in flight) against
``bench/answer_server.py`` in its own process, each answer after 3.5-4.5 s: about what one request
takes on an H200 with ~1,000 running (BENCHMARKS §6). The server notes when each request arrives; the
time until the 256th, 512th and 1,024th arrived is how long the server waits to be full, and the whole
pool's time follows from it. Two arms on the same rows, each first once and last once: as shipped
(``resolver.hand_over`` after each row that fills the engine's window, in a table larger than it),
and without that pause; then the same against answers in 10-50 ms, where the pause costs. (A table
the window holds never pauses: there the arms are the same code.) Results: ``bench/results/ramp.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from xladdin.core import resolver
from xladdin.jobs.pool_screen import screen_file
from xladdin.settings import Settings
from xladdin.tasks import ScreenTask

from .common import RESULTS, machine, rows, write_run
from .excel_path import _server, side_by_side, write_pool

MARKS = (256, 512, 1024)
IN_FLIGHT = 1024


def marks_for(rows: int) -> tuple[int, ...]:
    """The arrivals counted for a pool of ``rows``: those of ``MARKS`` it reaches, else its last row."""
    return tuple(n for n in MARKS if n <= rows) or (rows,)


def one_run(low: float, high: float, pool: Path, work: Path, hand_over: bool) -> dict[str, Any]:
    """The pool once on a fresh stand-in server and a fresh cache: seconds from the start until each mark
    of arrived requests, and until the report is written."""
    server, url = _server(low, high)
    shipped = resolver.hand_over
    try:
        if not hand_over:
            resolver.hand_over = lambda: None
        settings = Settings.load({"engine_url": url, "cache_dir": work / "cache", "max_parallel": IN_FLIGHT}, env={})
        t0 = time.monotonic()
        summary = screen_file(pool, work / "report.csv", settings, progress=False)
        seconds = time.monotonic() - t0
        with urllib.request.urlopen(url.removesuffix("/v1") + "/arrivals", timeout=30) as r:
            arrivals = sorted(json.loads(r.read()))
    finally:
        resolver.hand_over = shipped
        server.kill()
        server.join()
    marks = {f"to_{n}_s": round(arrivals[n - 1] - t0, 2) if len(arrivals) >= n else None
             for n in marks_for(summary.rows)}
    return {"rows": summary.rows, "errors": summary.errors,
            "first_s": round(arrivals[0] - t0, 2) if arrivals else None, **marks, "seconds": round(seconds, 2)}


def arms(n: int, low: float, high: float) -> dict[str, Any]:
    """Both arms on ``n`` rows against answers after ``low``-``high`` s, each first once and last once."""
    with tempfile.TemporaryDirectory() as tmp:
        pool = write_pool(Path(tmp) / "pool.csv", rows(n, seed=950))
        runs, _ = side_by_side({"hand_over": lambda work: one_run(low, high, pool, work, True),
                                "no hand_over": lambda work: one_run(low, high, pool, work, False)})
    last = marks_for(n)[-1]  # the server full (the window's requests in it), or the pool all sent

    def mean(arm: str, key: str) -> float:
        values = [r[key] for r in runs if r["arm"] == arm]
        return sum(values) / len(values)

    out = {"rows": n, "server": f"bench/answer_server.py, {low:g}-{high:g} s", "runs": runs, "full_at": last,
           "to_full_ratio": round(mean("hand_over", f"to_{last}_s") / mean("no hand_over", f"to_{last}_s"), 3),
           "seconds_ratio": round(mean("hand_over", "seconds") / mean("no hand_over", "seconds"), 3)}
    print(f"{n} rows, answers in {low:g}-{high:g} s: hand_over ÷ without: {out['to_full_ratio']} of the time to "
          f"{last:,} requests in flight, {out['seconds_ratio']} of the pool's")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench ramp", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=5400, help="rows against slow answers (fast: 2,000 or fewer)")
    p.add_argument("--out", default=str(RESULTS / "ramp.json"))
    args = p.parse_args(argv)
    out = {"task_version": ScreenTask.version, "in_flight": IN_FLIGHT, "machine": machine(),
           "slow": arms(args.rows, 3.5, 4.5), "fast": arms(min(args.rows, 2000), 0.01, 0.05)}
    write_run(args.out, out)
    return 0


def render(d: dict[str, Any]) -> list[str]:
    """Section 14 of docs/BENCHMARKS.md."""
    lines = ["## 14. How soon a table's requests reach the server (`python -m bench ramp`)", "",
             f"Rows through the CLI, {d['in_flight']:,} requests in flight, a stand-in server in its own process, a "
             "fresh cache each run; seconds from the start of `screen_file` until the server had the first and the "
             "counted requests, and until the report was written. One run on "
             f"{d['machine'].get('cpus')} CPUs, each arm first once and last once. `hand_over`: the table's thread "
             "pauses after each of the rows that fill the engine's window, in a table larger than it "
             "(`time.sleep(0)`), so the threads that read the cache and send the request get the GIL; "
             "`no hand_over`: it never pauses.", ""]
    for label, part in (("Slow answers (about one request's time on an H200 with ~1,000 running)", d["slow"]),
                        ("Fast answers (a lightly loaded server)", d["fast"])):
        marks = marks_for(part["rows"])
        lines += [f"{label}: {part['rows']:,} rows, {part['server']}.", "",
                  f"| arm | first | {' | '.join(f'{n:,}th' for n in marks)} | whole pool | errors |",
                  "|---|---|" + "---|" * len(marks) + "---|---|"]
        for r in part["runs"]:
            lines.append(f"| {r['arm']} | {r['first_s']} | {' | '.join(str(r[f'to_{n}_s']) for n in marks)} "
                         f"| **{r['seconds']}** | {r['errors']} |")
        lines += ["", f"With `hand_over` the server had its {part['full_at']:,}th request in "
                  f"**{part['to_full_ratio']}** of the time without it, and the pool took "
                  f"**{part['seconds_ratio']}** of the time (means of two runs each).", ""]
    return lines
