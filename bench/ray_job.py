"""The report-file job on Ray Data against the single-process CLI (``python -m bench ray_job``): the same
pool, every row naming its own report file, through ``xladdin screen --reports`` and through
``xladdin screen --reports --ray local --ray-cpus N``, each in a process of its own on an empty cache,
against the same stand-in server (``bench/answer_server.py``, its own process); each arm first once and
second once. Then the Ray job again on its full cache (the resume ledger: no row asked; the files are
read again by its Ray tasks).

The report files are copies of the annual-report PDFs in ``../shared/data`` made distinct
(``report_files.make_reports``). Results: ``bench/results/ray_job.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import RESULTS, machine, read_runs, write_run
from .excel_path import _server
from .report_files import REPORTS, make_reports, sources, write_pool

HEADLINE = ('ray_over_cli',)  # the numbers docs/BENCHMARKS.md gives for each earlier run


def run_arm(url: str, pool: Path, reports: Path, cache: Path, out: Path, extra: list[str]) -> dict[str, Any]:
    """``xladdin screen POOL --reports DIR [extra]`` in a process of its own: its wall seconds and the run's
    facts from the report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    env.update(XLADDIN_ENGINE_URL=url, XLADDIN_CACHE_DIR=str(cache))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "xladdin.cli.main", "screen", str(pool), "--reports", str(reports),
                           "-o", str(out), "--no-progress", *extra], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"xladdin screen {' '.join(extra)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    run = json.loads(out.read_text(encoding="utf-8"))["run"]
    return {"seconds": round(seconds, 3), "rows": run["rows"], "errors": run["errors"],
            "cache_hits": run["cache_hits"], "engine_requests": run["engine_requests"],
            "files_read": run["files_read"], "rows_per_s": round(run["rows"] / seconds, 2),
            "load_1min": [round(load, 2), round(os.getloadavg()[0], 2)],  # the shared machine's, before and after
            **({"ray_start_s": run["ray"]["start_s"]} if run.get("ray") else {})}


def verdicts(path: Path) -> list[dict[str, Any]]:
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    return [{k: v for k, v in r.items() if k != "缓存命中 cached"} for r in rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench ray_job", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=120, help="report-file rows")
    p.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    p.add_argument("--delay-ms", default="10,50", help="the stand-in server's answer delay, low,high")
    p.add_argument("--out", default=str(RESULTS / "ray_job.json"))
    args = p.parse_args(argv)
    low, high = (float(x) / 1000 for x in args.delay_ms.split(","))
    ray_args = ["--ray", "local", "--ray-cpus", str(args.cpus)]
    server, url = _server(low, high)
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as d:
            work = Path(d)
            reports = work / "reports"
            pool = write_pool(work / "pool.csv", make_reports(reports, args.rows, sources()))
            outputs: dict[str, Path] = {}
            for order in (("cli", "ray"), ("ray", "cli")):
                for arm in order:
                    cache = work / f"cache-{arm}-{len(runs)}"
                    out = work / f"{arm}-{len(runs)}.json"
                    run = run_arm(url, pool, reports, cache, out, ray_args if arm == "ray" else [])
                    runs.append({"arm": arm, **run})
                    print(json.dumps(runs[-1]), flush=True)
                    outputs.setdefault(arm, out)
                    if arm == "ray" and not any(r["arm"] == "ray_rerun" for r in runs):
                        again = run_arm(url, pool, reports, cache, work / "rerun.json", ray_args)
                        runs.append({"arm": "ray_rerun", **again})
                        print(json.dumps(runs[-1]), flush=True)
                    shutil.rmtree(cache, ignore_errors=True)
            same = verdicts(outputs["cli"]) == verdicts(outputs["ray"])
    finally:
        server.kill()
        server.join()
    best = {arm: min(r["seconds"] for r in runs if r["arm"] == arm) for arm in ("cli", "ray")}
    rerun = next(r for r in runs if r["arm"] == "ray_rerun")
    out = {"files": "copies of ../shared/data's annual reports" if REPORTS.is_dir() else "generated PDFs",
           "server": f"bench/answer_server.py, {args.delay_ms} ms", "machine": machine(), "rows": args.rows,
           "ray_cpus": args.cpus, "runs": runs, "same_report": same,
           "ray_over_cli": round(best["cli"] / best["ray"], 3),
           "ray_rerun_engine_requests": rerun["engine_requests"], "ray_rerun_over_first": round(
               rerun["seconds"] / next(r["seconds"] for r in runs if r["arm"] == "ray"), 3)}
    write_run(args.out, out)
    print(f"ray job: {out['ray_over_cli']}x the CLI's speed on {args.rows} report rows ({best['ray']} s against "
          f"{best['cli']} s); the same report: {same}; a rerun on its cache: {rerun['engine_requests']} engine "
          f"requests, {out['ray_rerun_over_first']} of the first run's time")
    return 0


def render(d: dict[str, Any]) -> list[str]:
    """Section 13 of docs/BENCHMARKS.md."""
    cpus = d["machine"].get("cpus") or 1
    loaded = max((x for r in d["runs"] for x in r.get("load_1min", [])), default=0)
    lines = ["## 13. The report-file job on Ray Data against the CLI (`python -m bench ray_job`)", "",
             f"{d['rows']} rows each naming its own report file ({d['files']}, each made distinct), the stand-in "
             f"server ({d['server']}), one run on {d['machine'].get('cpus')} CPUs: `xladdin screen --reports` "
             f"(a reader process per core) against the same command with `--ray local --ray-cpus {d['ray_cpus']}` "
             "(a local Ray instance started by the job), each in a process of its own on an empty cache, each arm "
             "first once and second once; wall time of the whole command (the Ray arm's includes starting and "
             "stopping Ray). The machine is shared: its load average is beside each run.", "",
             "| arm | seconds | rows/s | errors | engine requests | cache hits | files read | of which Ray's start "
             "| load (1 min) before, after |", "|---|---|---|---|---|---|---|---|---|"]
    for r in d["runs"]:
        lines.append(f"| {r['arm']} | {r['seconds']} | {r['rows_per_s']} | {r['errors']} | {r['engine_requests']} "
                     f"| {r['cache_hits']} | {r['files_read']} | {r.get('ray_start_s', '')} "
                     f"| {', '.join(map(str, r.get('load_1min', [])))} |")
    lines += ["", f"The Ray job: **{d['ray_over_cli']}×** the CLI's speed (best of each); the same report, row for "
              f"row: {d['same_report']}. Run again on its cache it asked the server {d['ray_rerun_engine_requests']} "
              f"times, in {d['ray_rerun_over_first']} of its first run's time (its Ray tasks read every file again).",
              *(["", f"Other work ran on the machine meanwhile (load up to {loaded} on {cpus} CPUs): both arms "
                 "competed with it for the CPU, so this ratio is not the one of an idle machine."]
                if loaded > cpus else []),
              ""]
    gpu = RESULTS / "gpu.json"  # the job on a GPU box (python -m bench gpu --parts ray_files), as written with the run
    runs = read_runs(gpu)
    on_gpu = next((r["data"]["ray_files_session"] for r in reversed(runs)
                   if "ray_files_session" in r.get("data", {})), {})
    if "doc" in on_gpu:
        return [*lines, *on_gpu["doc"], ""]
    return [*lines, "Not run here: `ray.data.llm` with vLLM replicas, and a cluster of several GPU machines (the kinds "
            "with 2, 4 or 8 GPUs are not lent now).", ""]
