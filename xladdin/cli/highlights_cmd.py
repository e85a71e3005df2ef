"""``xladdin highlights POOL -o REPORT``"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..jobs.pool_screen import highlights_file
from .screen_cmd import summary_line
from .settings_options import add_settings_options, settings_from


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("highlights", help="write numbered results highlights of each row's report, every number "
                       "checked against the figures read and the source")
    p.add_argument("input", help="pool .csv/.xlsx with a report text (财报摘要) or report file (报告文件) column")
    p.add_argument("-o", "--output", help="report .xlsx/.csv/.json [default: INPUT_highlights.xlsx]")
    p.add_argument("--points", type=int, help="highlights per row (1-5, default 3)")
    p.add_argument("--max-chars", type=int, help="characters per highlight (default 60)")
    p.add_argument("--reports", help="a folder of report files (.pdf .txt .md .html), matched by stock code")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_settings_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    output = args.output or str(Path(args.input).with_name(Path(args.input).stem + "_highlights.xlsx"))
    summary = highlights_file(args.input, output, settings_from(args), points=args.points, max_chars=args.max_chars,
                              progress=not args.no_progress, reports=args.reports)
    if summary.note:
        print(f"note: {summary.note}", file=sys.stderr)
    print(summary_line(summary, time.perf_counter() - t0, "highlights written by code from the figures it read"))
    return 1 if summary.errors else 0
