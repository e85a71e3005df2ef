"""``xladdin calc build|install``: the worksheet functions as a LibreOffice Calc extension."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..calc import build


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calc", help="build (and install) the LibreOffice Calc extension")
    p.add_argument("action", choices=("build", "install"), help="build: write the .oxt; install: build and "
                   "add it to LibreOffice (unopkg add)")
    p.add_argument("-o", "--output", type=Path, default=Path("xladdin.oxt"), help="the extension file "
                   "(default: xladdin.oxt)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    problem = build.python_problem()
    if problem:
        print(f"xladdin: warning: {problem}", file=sys.stderr)
    out = build.build(args.output)
    print(f"wrote {out} (functions: {', '.join(f.name for f in build.FUNCTIONS)})")
    if args.action == "install":
        print(f"ran {build.install(out)}; restart LibreOffice to load it")
    else:
        print(f"install it with: unopkg add {out}   (then restart LibreOffice)")
    return 0
