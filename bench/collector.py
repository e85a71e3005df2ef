"""The garbage collector set for many requests against Python's default (``python -m bench collector``).

The same command (``xladdin screen``, its ``main``) on the same rows and the same stand-in server, each run in a fresh
process of its own (the collector's thresholds are the process's, and so is its heap): the youngest
generation collected every 700 objects (Python's default: the child sets ``collector.YOUNG`` to it, so
the table does not raise it) against every ``collector.YOUNG``. Its seconds and peak RSS. Results:
``bench/results/collector.json``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from xladdin import collector

from .common import RESULTS, write_run
from .excel_path import on_stand_in, write_pool

HEADLINE = ("raised_over_default_time",)
DEFAULT = 700  # Python's own threshold of the youngest generation
CHILD = """
import contextlib, io, json, resource, sys, time
from xladdin import collector
collector.YOUNG = int(sys.argv[1])
from xladdin.cli.main import main
t0 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["screen", sys.argv[2], "-o", sys.argv[3], "--no-progress"])
print(json.dumps({"exit": code, "seconds": round(time.perf_counter() - t0, 3),
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""


def run(young: int, url: str, work: Path, data: list[dict[str, Any]]) -> dict[str, Any]:
    """``xladdin screen`` (its ``main``) on the rows, in a process of its own; its seconds from the command's
    start to its end."""
    pool = write_pool(work / "pool.csv", data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    env |= {"XLADDIN_ENGINE_URL": url, "XLADDIN_CACHE_DIR": str(work / "cache")}
    r = subprocess.run([sys.executable, "-c", CHILD, str(young), str(pool), str(work / "report.csv")],
                       capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode:
        raise SystemExit(f"the CLI run failed: {r.stderr.strip()[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    with (work / "report.csv").open(encoding="utf-8-sig") as f:
        errors = sum(1 for row in csv.DictReader(f) if row.get("错误 error"))
    return {"youngest_threshold": young, "rows": len(data), "seconds": out["seconds"], "exit": out["exit"],
            "errors": errors, "peak_rss_mib": out["peak_rss_mib"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench collector", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=5400)
    p.add_argument("--delay-ms", default="10,50", help="the stand-in server's answer delay, low,high")
    p.add_argument("--out", default=str(RESULTS / "collector.json"))
    args = p.parse_args(argv)
    out, best = on_stand_in({"python's default": functools.partial(run, DEFAULT),
                             "raised": functools.partial(run, collector.YOUNG)}, args.rows, args.delay_ms, seed=0)
    out["raised_over_default_time"] = round(best["raised"] / best["python's default"], 3)
    write_run(args.out, out)
    print(f"the CLI with the collector raised to {collector.YOUNG}: {out['raised_over_default_time']}x the time "
          f"with Python's default ({args.rows} rows, best of two each)")
    return 0


def render(d: dict[str, Any]) -> list[str]:
    """Section 17 of docs/BENCHMARKS.md."""
    lines = ["## 17. The garbage collector set for many requests (`python -m bench collector`)", "",
             f"`xladdin screen` on {d['rows']} rows and the same stand-in server ({d['server']}), a fresh process and "
             "cache per run: the youngest generation collected every 700 objects (Python's default) or every "
             "`collector.YOUNG` (what a table and the cell doors set). One run on "
             f"{d['machine'].get('cpus')} CPUs, each arm first once and second once.", "",
             "| arm | threshold | seconds | errors | peak RSS (MiB) |", "|---|---|---|---|---|"]
    for r in d["runs"]:
        lines.append(f"| {r['arm']} | {r['youngest_threshold']} | {r['seconds']} | {r['errors']} "
                     f"| {r['peak_rss_mib']} |")
    lines += ["", f"Raised, the pool takes **{d['raised_over_default_time']}×** the time it takes with Python's "
              "default (best run of each).", ""]
    return lines
