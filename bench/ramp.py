"""How soon a table's requests reach the server (``python -m bench ramp``).

A pool through the CLI (``screen_file`` on a CSV, 1,024 requests in flight) against
``bench/answer_server.py`` in its own process, each answer after 3.5-4.5 s: about what one request
takes on an H200 with ~1,000 running (BENCHMARKS §6). The server notes when each request arrives; the
time until the 256th, 512th and 1,024th arrived is how long the server waits to be full, and the whole
pool's time follows from it. Two arms on the same rows, each first once and last once: as shipped
(``resolver.hand_over`` after each row), and without that pause. Results: ``bench/results/ramp.json``.
"""

from __future__ import annotations

import argparse
import csv
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

from .common import RESULTS, machine, rows
from .excel_path import FIELDS, HEADER, _server

MARKS = (256, 512, 1024)
IN_FLIGHT = 1024


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
    marks = {f"to_{n}_s": round(arrivals[n - 1] - t0, 2) if len(arrivals) >= n else None for n in MARKS}
    return {"arm": "hand_over" if hand_over else "no hand_over", "rows": summary.rows, "errors": summary.errors,
            "first_s": round(arrivals[0] - t0, 2) if arrivals else None, **marks, "seconds": round(seconds, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench ramp", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=5400)
    p.add_argument("--delay-s", default="3.5,4.5", help="the stand-in server's answer delay, low,high")
    p.add_argument("--out", default=str(RESULTS / "ramp.json"))
    args = p.parse_args(argv)
    low, high = (float(x) for x in args.delay_s.split(","))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        pool = Path(tmp) / "pool.csv"
        with pool.open("w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(HEADER)
            w.writerows([r[k] for k in FIELDS] for r in rows(args.rows, seed=950))
        for k, hand_over in enumerate((True, False, False, True)):
            work = Path(tmp) / f"run{k}"
            work.mkdir()
            runs.append(one_run(low, high, pool, work, hand_over))
            print(json.dumps(runs[-1]), flush=True)

    def mean(arm: str, key: str) -> float:
        values = [r[key] for r in runs if r["arm"] == arm]
        return sum(values) / len(values)

    out = {"task_version": ScreenTask.version, "rows": args.rows, "in_flight": IN_FLIGHT,
           "server": f"bench/answer_server.py, {args.delay_s} s", "machine": machine(), "runs": runs,
           "to_1024_ratio": round(mean("hand_over", "to_1024_s") / mean("no hand_over", "to_1024_s"), 3),
           "seconds_ratio": round(mean("hand_over", "seconds") / mean("no hand_over", "seconds"), 3)}
    Path(args.out).write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(f"hand_over ÷ without: {out['to_1024_ratio']} of the time to 1,024 requests in flight, "
          f"{out['seconds_ratio']} of the pool's")
    return 0


def render(d: dict[str, Any]) -> list[str]:
    """Section 14 of docs/BENCHMARKS.md."""
    lines = ["## 14. How soon a table's requests reach the server (`python -m bench ramp`)", "",
             f"{d['rows']:,} rows through the CLI, {d['in_flight']:,} requests in flight, a stand-in server "
             f"({d['server']}: about one request's time on an H200 with ~1,000 running) in its own process, a "
             f"fresh cache each run; seconds from the start of `screen_file` until the server had the first, the "
             f"256th, 512th and 1,024th request, and until the report was written. One run on "
             f"{d['machine'].get('cpus')} CPUs, each arm first once and last once. `hand_over`: the table's thread "
             "pauses after each row it hands on (`time.sleep(0)`), so the threads that read the cache and send the "
             "request get the GIL.", "",
             "| arm | first | 256th | 512th | 1,024th | whole pool | errors |", "|---|---|---|---|---|---|---|"]
    for r in d["runs"]:
        lines.append(f"| {r['arm']} | {r['first_s']} | {r['to_256_s']} | {r['to_512_s']} | {r['to_1024_s']} "
                     f"| **{r['seconds']}** | {r['errors']} |")
    lines += ["", f"With `hand_over` the server was full in **{d['to_1024_ratio']}** of the time without it, and "
              f"the pool took {d['seconds_ratio']} of the time (means of two runs each).", ""]
    return lines
