"""``xladdin calc build|install``: the worksheet functions as a LibreOffice Calc extension."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..calc import build

TEMPLATE = Path(__file__).resolve().parents[2] / "workbook_templates" / "stock_screen.xlsx"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calc", help="build (and install) the LibreOffice Calc extension")
    p.add_argument("action", choices=("build", "install", "template"), help="build: write the .oxt; install: "
                   "build and add it to LibreOffice (unopkg add); template: the Excel template as a Calc workbook")
    p.add_argument("-o", "--output", type=Path, help="the extension file (default: xladdin.oxt), or the "
                   "workbook (default: stock_screen.ods)")
    p.add_argument("--from", dest="source", type=Path, default=TEMPLATE, help="template: the Excel workbook "
                   "(default: the project's stock_screen.xlsx)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    problem = build.python_problem()
    if problem:
        print(f"xladdin: warning: {problem}", file=sys.stderr)
    if args.action == "template":
        if not args.source.is_file():
            print(f"xladdin: error: no workbook {args.source}", file=sys.stderr)
            return 2
        out = args.output or Path("stock_screen.ods")
        ranges = build.template(args.source, out)
        print(f"wrote {out}: {len(ranges)} formulas call the add-in (install it with: xladdin calc install)")
        return 0
    out = build.build(args.output or Path("xladdin.oxt"))
    print(f"wrote {out} (functions: {', '.join(f.name for f in build.FUNCTIONS)})")
    if args.action == "install":
        print(f"ran {build.install(out)}; restart LibreOffice to load it")
    else:
        print(f"install it with: unopkg add {out}   (then restart LibreOffice)")
    return 0
