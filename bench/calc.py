"""LibreOffice Calc against the CLI on the same rows and the same stand-in server (``python -m bench calc``).

The Calc arm is a real headless LibreOffice with the extension (``xladdin calc build``): a sheet of the
rows, a ``QWEN_SCREEN`` array formula beside the first row filled down to the last as a user fills it
(Calc's copy of the block, doubled at each copy: a formula per row), and the time until no cell shows
its placeholder (LibreOffice's start is timed apart; where the cells stand is read from their
addresses, not asked of LibreOffice a range at a time: each look is one read of the sheet, and the time
ends at the look that found no placeholder, its values the ones checked). The CLI arm is ``screen_file`` on a CSV of the
same rows. Both reach ``bench/answer_server.py`` (answers after 10-50 ms, in its own process) with a
fresh cache each. Results: ``bench/results/calc.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from xladdin.calc import build
from xladdin.calc.headless import column
from xladdin.sheet import functions

from .common import RESULTS, write_run
from .excel_path import FIELDS, HEADER, cli, on_stand_in

LOOK = "the look that found no placeholder"  # what a run's time ends at (earlier runs: their note)
HEADLINE = ('calc_over_cli_time', 'table_over_cli_time')  # the numbers docs/BENCHMARKS.md gives for each earlier run


def calc(url: str, workdir: Path, data: list[dict[str, Any]], oxt: Path, table: bool = False) -> dict[str, Any]:
    """The sheet filled by a formula per row, or (``table``) by one formula over the table and its header."""
    width = len(functions.SPILL_FIELDS)
    sheet = [HEADER] + [[r[k] for k in FIELDS] for r in data]
    last = len(sheet)
    end = column(8 + width - 1)
    # the table: one formula over it; else a formula beside the first row filled down, as a user fills it
    formulas = [[f"I1:{end}{last}", f"=QWEN_SCREEN(A1:G{last};1)"]] if table else []
    fill_down = [] if table else [[f"I2:{end}2", "=QWEN_SCREEN(A2:G2)", last - 1]]
    status = [f"A{last + 2}:B{last + 1 + functions.STATUS_ROWS}", "=QWEN_STATUS()"]
    # the add-in's first load, timed apart: xladdin imported (a status cell), and what a table formula imports
    # (pandas, for a range with its header: a header-only table, which asks nothing)
    warm = [["ZZ1:ZZ1", "=QWEN_STATUS()"], [f"AAA1:{column(26 * 27 + width - 1)}1", "=QWEN_SCREEN(A1:G1;1)"]]
    job = workdir / "job.json"
    job.write_text(json.dumps({"rows": sheet, "formulas": [*formulas, status], "fill_down": fill_down,
                               "warm": warm}, ensure_ascii=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    env |= {"XLADDIN_ENGINE_URL": url, "XLADDIN_CACHE_DIR": str(workdir / "calc-cache")}
    t0 = time.perf_counter()
    out = build.headless(["--profile", str(workdir / "profile"), "--install", str(oxt), "--fill", str(job),
                          "--bound", "600", "--warm"], env)
    wall = time.perf_counter() - t0
    values = out["values"][0][1:] if table else [block[0] for block in out["values"][: last - 1]]
    state = {row[0]: row[1] for row in out["recalculated"][-1]}
    return {"rows": len(values), "seconds": out["seconds"], "filled": out["filled"],
            "errors": sum(str(v[0]).startswith("#QWEN") for v in values), "entered_s": out["entered_s"],
            "loading_the_add_in_s": out["warm_up_s"], "with_libreoffice_start_s": round(wall, 3),
            "engine_requests": int(state["asked of the engine"])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench calc", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=500)
    p.add_argument("--delay-ms", default="10,50", help="the stand-in server's answer delay, low,high")
    p.add_argument("--out", default=str(RESULTS / "calc.json"))
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        oxt = build.build(Path(tmp) / "xladdin.oxt")
        out, best = on_stand_in({"cli": cli,
                                 "calc": lambda url, work, data: calc(url, work, data, oxt),
                                 "calc, one table formula": lambda url, work, data: calc(url, work, data, oxt, True)},
                                args.rows, args.delay_ms)
    out |= {"timed_to": LOOK, "calc_over_cli_time": round(best["calc"] / best["cli"], 3),
            "table_over_cli_time": round(best["calc, one table formula"] / best["cli"], 3)}
    write_run(args.out, out)
    print(f"Calc fills the sheet in {out['calc_over_cli_time']}x the CLI's time, {out['table_over_cli_time']}x "
          f"with one table formula ({args.rows} rows, best of two each)")
    return 0


def render(d: dict[str, Any]) -> list[str]:
    """Section 11 of docs/BENCHMARKS.md."""
    lines = ["## 11. LibreOffice Calc against the CLI (`python -m bench calc`)", "",
             f"{d['rows']} rows, the same rows and the same stand-in server ({d['server']}), a fresh cache per run; "
             "the Calc arm is a headless LibreOffice with the extension, a `QWEN_SCREEN` array formula beside the "
             "first row filled down to the last (a formula per row, as a user fills it), timed from the formula's "
             "entry until a look at the sheet finds no cell showing its placeholder (one read of the sheet a look, "
             "every 50 ms; the values checked are that look's); LibreOffice's start and the add-in's "
             "first load (a `QWEN_STATUS` cell and a header-only `QWEN_SCREEN` table entered first: xladdin and "
             "what a table formula reads its range with, pandas, imported inside LibreOffice) are timed apart. "
             f"One run on {d['machine'].get('cpus')} CPUs, each arm first once and second once.", "",
             "| arm | seconds | errors | engine requests | loading the add-in | with LibreOffice's start |",
             "|---|---|---|---|---|---|"]
    for r in d["runs"]:
        lines.append(f"| {r['arm']} | {r['seconds']} | {r['errors']} | {r.get('engine_requests', '')} "
                     f"| {r.get('loading_the_add_in_s', '')} | {r.get('with_libreoffice_start_s', '')} |")
    lines += ["", f"Calc fills the sheet in **{d['calc_over_cli_time']}×** the CLI's time with a formula per row, "
              f"**{d.get('table_over_cli_time', '–')}×** with one `QWEN_SCREEN(A1:G{d['rows'] + 1};1)` over the table "
              "(best run of each). A formula per row costs two calls of the add-in per cell inside LibreOffice (the "
              "placeholder, then the value); the table is one call.", ""]

    return lines
