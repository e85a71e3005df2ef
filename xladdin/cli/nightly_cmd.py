"""``xladdin nightly POOL --dir DIR``: the night's screen in one command, no shell. Writes ``DIR/D.xlsx``
(D: ``--date``, default today) as of that day, compares it with the newest earlier night's report in
DIR (none on night 1) and writes what changed beside it (``DIR/D.changes.json``). Exit status: 0 every
row screened and nothing changed (or night 1), 1 some rows failed, plus 4 when rows changed."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
import time
from pathlib import Path

from ..errors import InputError
from ..jobs.changes import Saved, read_screen
from ..jobs.pool_screen import screen_file
from ..jobs.report import write_changes
from ..tasks.screen import parse_as_of
from .screen_cmd import exit_status, load_rules, summary_line
from .settings_options import add_settings_options, settings_from

SHOWN_CHANGES = 20  # changed rows printed (new 高 first); all of them in DATE.changes.json
NIGHT = re.compile(r"^(\d{4}-\d{2}-\d{2})\.xlsx$")  # a night's report: DIR/2021-04-30.xlsx


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nightly", help="the night's screen: DIR/DATE.xlsx as of that day, compared with the "
                       "night before", description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("pool", help="the pool file (.csv .xlsx .xls .json .parquet)")
    p.add_argument("--dir", required=True, metavar="DIR", help="the folder of the nights' reports (made if missing)")
    p.add_argument("--reports", metavar="DIR", help="folder of report files named with the stock code")
    p.add_argument("--date", metavar="DATE", help="the night's day (2021-04-30) [default: today]: the report's "
                   "name and its as-of day")
    p.add_argument("--rules", help="TOML file overriding rule thresholds")
    p.add_argument("--undated-reports", action="store_true", default=None,
                   help="use a report whose publication day is not known (its row flagged 公告日未知)")
    p.add_argument("--allow-future", action="store_true", help="accept a --date after today")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_settings_options(p)
    p.set_defaults(func=run)


def earlier_night(folder: Path, day: dt.date, skipped: list[str] | None = None) -> Saved | None:
    """The newest readable night's report in ``folder`` before ``day`` (named ``YYYY-MM-DD.xlsx``), read (the
    screen compares with it as read here), or ``None``; a night that cannot be read (empty, cut short,
    damaged) is passed over, its reason added to ``skipped``, and the one before it taken."""
    nights = []
    if folder.is_dir():
        for entry in folder.iterdir():
            m = NIGHT.match(entry.name)
            if m and entry.is_file():
                try:
                    night = dt.date.fromisoformat(m.group(1))
                except ValueError:
                    continue
                if night < day:
                    nights.append((night, entry))
    for _, entry in sorted(nights, reverse=True):
        try:
            return read_screen(entry)
        except InputError as e:
            if skipped is not None:
                skipped.append(str(e))
    return None


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    day = parse_as_of(args.date) if args.date else dt.date.today()
    if day is None:
        raise InputError("date", "give the night's day as 2021-04-30")
    if day > dt.date.today() and not args.allow_future:
        raise InputError("date", f"{day.isoformat()} is after today: a night is screened as of its day "
                         "(--allow-future to name a later one anyway)")
    folder = Path(args.dir)
    if folder.exists() and not folder.is_dir():
        raise InputError("dir", f"{folder} is not a folder")
    output = folder / f"{day.isoformat()}.xlsx"
    skipped: list[str] = []
    before = earlier_night(folder, day, skipped)
    for why in skipped:
        print(f"skipped an earlier night: {why}", file=sys.stderr)
    summary = screen_file(args.pool, str(output), settings_from(args), rules=load_rules(args.rules),
                          progress=not args.no_progress, reports=args.reports, compare=before, as_of=day)
    if summary.note:
        print(f"note: {summary.note}", file=sys.stderr)
    print(summary_line(summary, time.perf_counter() - t0, "flag 模型未作答"))
    if summary.changes is None:
        print(f"night 1: no earlier night's report in {folder} to compare with")
    else:
        changes = output.with_name(f"{day.isoformat()}.changes.json")
        write_changes(changes, summary.changes)
        print(f"{summary.changes.line()} (since {before.path.name}) → {changes}")
        for change in summary.changes.rows[:SHOWN_CHANGES]:  # what cron mails: the rows, new 高 first
            print(f"  {change.kind.split()[0]}\t{change.code}\t{change.name or ''}\t{change.what}")
        if len(summary.changes.rows) > SHOWN_CHANGES:
            print(f"  … and {len(summary.changes.rows) - SHOWN_CHANGES} more in {changes.name}")
    return exit_status(summary)
