"""``python -m bench.engine_profile DIR``: what ``server/gpu_box.sh profile`` recorded during a pool, summed.

- The GPU (``gpu.csv``, nvidia-smi every 250 ms): utilisation (the share of time a kernel ran), power and SM
  clock while the pool ran (between ``start`` and ``end``), as median and quartiles.
- The engine core's Python stacks (``engine.speedscope.json``, py-spy at 100 Hz, one profile per thread):
  per thread, the share of the recording's samples (``--seconds`` × 100 Hz) in which it was busy (not
  waiting in the OS), and the functions it spent them in, inclusive (the function or what it called) and
  by itself.

Prints JSON; ``--top N`` functions per thread.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any


def _quartiles(values: list[float]) -> dict[str, float] | None:
    if len(values) < 4:
        return None
    q = statistics.quantiles(values, n=4)
    return {"median": round(q[1], 1), "q1": round(q[0], 1), "q3": round(q[2], 1)}


def gpu_summary(folder: Path) -> dict[str, Any] | None:
    path = folder / "gpu.csv"
    if not path.exists():
        return None
    start = float((folder / "start").read_text()) if (folder / "start").exists() else float("-inf")
    end = float((folder / "end").read_text()) if (folder / "end").exists() else float("inf")
    rows = []
    for row in csv.reader(path.read_text().splitlines()):
        if len(row) < 5:
            continue
        try:
            when = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").astimezone().timestamp()
            rows.append((when, *(float(v) for v in row[1:5])))
        except ValueError:
            continue
    during = [r for r in rows if start <= r[0] <= end] or rows
    return {"samples": len(during),
            "utilisation_pct": _quartiles([r[1] for r in during]),
            "memory_utilisation_pct": _quartiles([r[2] for r in during]),
            "power_w": _quartiles([r[3] for r in during]),
            "sm_clock_mhz": _quartiles([r[4] for r in during])}


def _name(frame: dict[str, Any]) -> str:
    file = str(frame.get("file", ""))
    short = "/".join(file.split("/")[-2:]) if file else ""
    return f"{frame.get('name', '?')} ({short})" if short else str(frame.get("name", "?"))


def stacks_summary(folder: Path, top: int = 15, seconds: float = 15.0, rate: int = 100) -> list[dict[str, Any]] | None:
    path = folder / "engine.speedscope.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    frames = [_name(f) for f in data["shared"]["frames"]]
    threads = []
    for prof in data["profiles"]:
        weights = prof.get("weights") or [1] * len(prof["samples"])
        total = sum(weights)
        if not total:
            continue
        inclusive: Counter[str] = Counter()
        own: Counter[str] = Counter()
        for stack, w in zip(prof["samples"], weights, strict=True):
            if not stack:
                continue
            own[frames[stack[-1]]] += w
            for name in {frames[i] for i in stack}:
                inclusive[name] += w
        recorded = seconds if prof.get("unit") == "seconds" else seconds * rate  # py-spy weighs in seconds
        threads.append({"thread": prof.get("name", "?"), "busy_share": round(total / recorded, 3),
                        "inclusive": [(n, round(c / total, 3)) for n, c in inclusive.most_common(top)],
                        "self": [(n, round(c / total, 3)) for n, c in own.most_common(top)]})
    return sorted(threads, key=lambda t: -t["busy_share"])


# the engine core's main thread, by what it does (functions named as py-spy names them, inclusive)
MAIN_THREAD_PARTS = {"model forward": "UniProcExecutor.execute_model", "scheduler": "Scheduler.schedule",
                     "outputs": "Scheduler.update_from_output",
                     "grammar: accepting tokens": "GrammarMatcher.accept_token",
                     "grammar: bitmask wait": "StructuredOutputManager.grammar_bitmask"}


def trial(folder: Path, seconds: float = 15.0) -> dict[str, Any]:
    """What a trial's record keeps of a profile: the GPU while the pool ran, the engine core's main thread's
    busy share and each part's share of the recording's time, the bitmask threads' mean busy share."""
    gpu = gpu_summary(folder) or {}
    threads = stacks_summary(folder, top=10**6, seconds=seconds) or []
    out: dict[str, Any] = {"gpu_utilisation_pct": gpu.get("utilisation_pct"), "gpu_power_w": gpu.get("power_w")}
    main_thread = next((t for t in threads if "MainThread" in t["thread"]), None)
    if main_thread is not None:
        inclusive = dict(main_thread["inclusive"])
        busy = main_thread["busy_share"]
        out["engine_main_thread_busy"] = busy
        out["engine_main_thread_parts"] = {
            part: round(sum(c for n, c in inclusive.items() if n.startswith(fn)) * busy, 3)
            for part, fn in MAIN_THREAD_PARTS.items()}
    fill = [t["busy_share"] for t in threads if t["self"] and "fill_next_token_bitmask" in t["self"][0][0]]
    if fill:
        out["bitmask_threads"] = {"threads": len(fill), "mean_busy": round(sum(fill) / len(fill), 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.engine_profile", description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--seconds", type=float, default=15.0, help="the recording's length (PROFILE_S)")
    p.add_argument("--trial", action="store_true", help="only what a trial's record keeps (``trial``)")
    args = p.parse_args(argv)
    if args.trial:
        print(json.dumps(trial(args.folder, args.seconds), ensure_ascii=False, indent=1))
        return 0
    summary = {"gpu": gpu_summary(args.folder),
               "engine_threads": stacks_summary(args.folder, args.top, args.seconds)}
    print(json.dumps(summary, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
