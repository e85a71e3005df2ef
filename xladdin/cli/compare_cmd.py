"""``xladdin compare SOURCE -o OUT.xlsx``: industries and companies compared over the years."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..jobs.trends import compare_file
from .settings_options import add_settings_options, settings_from


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="industries and companies compared over the years, from a screen report or "
                       "a folder of report files",
                       description="A workbook comparing industries (the median of each figure, a column per "
                       "period and the change, with a chart of the years) and companies over their periods "
                       "(several reports of one company make its trend). SOURCE is what xladdin screen wrote, or "
                       "a folder of report files, all read by code (no model).")
    p.add_argument("source", help="a screen report (.xlsx/.csv/.json) or a folder of report files")
    p.add_argument("-o", "--output", help="the workbook (.xlsx) [default: SOURCE_compare.xlsx]")
    p.add_argument("--pool", help="a pool file giving each code's industry (for a folder of reports)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_settings_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    source = Path(args.source)
    output = args.output or str(source.with_name(source.stem + "_compare.xlsx"))
    out = compare_file(source, output, settings_from(args), pool=args.pool, progress=not args.no_progress)
    print(f"→ {out}")
    return 0
