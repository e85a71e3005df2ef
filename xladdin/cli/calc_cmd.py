"""``xladdin calc build|install|template|doctor``: the worksheet functions as a LibreOffice Calc extension."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..calc import build

TEMPLATE = Path(__file__).resolve().parents[2] / "workbook_templates" / "stock_screen.xlsx"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calc", help="build (and install) the LibreOffice Calc extension")
    p.add_argument("action", choices=("build", "install", "template", "doctor"), help="build: write the .oxt; "
                   "install: build and add it to LibreOffice; template: the Excel template as a Calc workbook; "
                   "doctor: whether the add-in will load in this machine's LibreOffice from this environment")
    p.add_argument("-o", "--output", type=Path, help="the extension file (default: xladdin.oxt), or the "
                   "workbook (default: stock_screen.ods)")
    p.add_argument("--from", dest="source", type=Path, default=TEMPLATE, help="template: the Excel workbook "
                   "(default: the project's stock_screen.xlsx)")
    p.add_argument("--profile", type=Path, help="install: into this LibreOffice user profile (the folder "
                   "LibreOffice is started with as -env:UserInstallation=file://DIR; default: LibreOffice's own)")
    p.add_argument("--shared", action="store_true", help="install: for all users of this machine "
                   "(unopkg --shared; as root)")
    p.set_defaults(func=run)


def doctor() -> int:
    lo = build._calc_python()
    if lo is not None:
        print(f"LibreOffice's Python: {lo.path} ({lo.full_version}, from {lo.prefix})")
    print(f"this environment: {sys.prefix} (Python {'.'.join(map(str, sys.version_info[:3]))}, "
          f"from {sys.base_prefix})")
    found = build.findings()
    for f in found:
        print(f"{'problem' if f.fatal else 'note'}: {f.text}")
    fatal = sum(f.fatal for f in found)
    print(f"{fatal} problem(s): the add-in will not load this way" if fatal else
          "ok: the add-in built from this environment loads in this LibreOffice")
    return 1 if fatal else 0


def run(args: argparse.Namespace) -> int:
    if args.action == "doctor":
        return doctor()
    if args.profile and args.shared:
        print("xladdin: error: --profile or --shared, not both", file=sys.stderr)
        return 2
    for f in build.findings():
        print(f"xladdin: warning: {f.text}", file=sys.stderr)
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
        profile = f" -env:UserInstallation={args.profile.resolve().as_uri()}" if args.profile else ""
        print(f"{build.install(out, args.profile, args.shared)}; restart LibreOffice{profile} to load it")
    else:
        print(f"install it with: xladdin calc install (or unopkg add {out}), then restart LibreOffice")
    return 0
