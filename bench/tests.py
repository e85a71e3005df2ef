"""``python -m bench tests``: the test suite's count and time, the one place the README and docs/testing.md
point to for them (section 18 of docs/BENCHMARKS.md).

Runs ``python -m pytest -q`` in a fresh process (or, with ``--from-log LOG``, reads the summary line of a run
already made: `.ci/run`'s output, say) and records what pytest said: passed, skipped, failed and the
seconds, with the commit and the machine. Results: ``bench/results/tests.json``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from .common import RESULTS, machine, write_run

ROOT = Path(__file__).resolve().parent.parent
# pytest's last line: "969 passed, 3 skipped, 13 warnings in 779.31s (0:12:59)"
SUMMARY = re.compile(r"^=*\s*(?P<parts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s\b", re.MULTILINE)


def summary(text: str) -> dict[str, Any]:
    """pytest's counts and seconds from its output (the last summary line); ``SystemExit`` without one."""
    found = list(SUMMARY.finditer(text))
    if not found:
        raise SystemExit("no pytest summary line (N passed … in S s) in the output")
    last = found[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", last["parts"])}
    return {"passed": counts.get("passed", 0), "skipped": counts.get("skipped", 0),
            "failed": counts.get("failed", 0) + counts.get("errors", 0) + counts.get("error", 0),
            "seconds": round(float(last["seconds"])), "tests": sum(counts.get(k, 0) for k in ("passed", "skipped",
                                                                                                 "failed"))}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench tests", description=__doc__.split("\n\n")[0])
    p.add_argument("--from-log", metavar="LOG", help="read the summary of a run already made (its output)")
    p.add_argument("--how", default="`.venv/bin/python -m pytest -q`", help="how the run was made, as recorded")
    p.add_argument("--commit", help="the code the run tested (default: this checkout's HEAD)")
    p.add_argument("--out", default=str(RESULTS / "tests.json"))
    args = p.parse_args(argv)
    if args.from_log:
        text = Path(args.from_log).read_text(encoding="utf-8", errors="replace")
    else:
        text = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=ROOT, capture_output=True,
                              text=True).stdout
    out = {**summary(text), "commit": args.commit or commit(), "how": args.how, "machine": machine()}
    write_run(args.out, out)
    print(f"{out['passed']} passed, {out['skipped']} skipped, {out['failed']} failed in {out['seconds']} s")
    return 0


def render(d: dict[str, Any]) -> list[str]:
    """Section 18 of docs/BENCHMARKS.md."""
    minutes, seconds = divmod(d["seconds"], 60)
    return ["## 18. The test suite (`python -m bench tests`)", "",
            f"**{d['tests']} tests: {d['passed']} passed, {d['skipped']} skipped, {d['failed']} failed, in "
            f"{minutes} min {seconds:02d} s** on {d['machine'].get('cpus')} CPUs ({d['when']}, the code of "
            f"{d['commit']}, {d['how']}). A loaded machine takes longer; no test fails for it (timings are "
            "measured here, never asserted). Tests whose tools are missing skip.", ""]


HEADLINE = ("tests", "passed", "skipped", "seconds")
