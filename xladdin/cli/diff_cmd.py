"""``xladdin diff OLD NEW``: what changed between two screen reports. Exit status as diff(1):
0 nothing changed, 1 rows changed, 2 error."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import InputError
from ..jobs.changes import compare_files
from ..jobs.report import write_changes


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="what changed between two screen reports (level, score, flags; rows in/out)",
                       description="Rows whose risk level, score or flags changed, new 高 rows first, and the rows "
                       "that appeared or left. Exit status: 0 nothing changed, 1 rows changed, 2 error.")
    p.add_argument("old", help="the earlier report (.xlsx, .csv or .json as xladdin screen wrote it)")
    p.add_argument("new", help="the later report")
    p.add_argument("-o", "--output", help="write the changes: .xlsx (a Changes sheet) or .json")
    p.add_argument("--json", action="store_true", help="print the changes as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.output:
        out = Path(args.output).resolve()
        for given in (args.old, args.new):
            if Path(given).resolve() == out:
                raise InputError("output", f"{args.output} is one of the reports compared: name another file for "
                                 "the changes")
    changes = compare_files(args.old, args.new)
    if args.output:
        write_changes(args.output, changes)
    if args.json:
        json.dump(changes.as_dict(), sys.stdout, ensure_ascii=False, indent=1)
        print()
    else:
        for change in changes.rows:
            print(f"{change.kind.split()[0]}\t{change.code}\t{change.name or ''}\t{change.what}")
        print(changes.line() + (f" → {args.output}" if args.output else ""))
    return 1 if changes else 0
