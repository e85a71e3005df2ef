"""``xladdin eval GOLD -o eval.json``: a gold pool (.csv/.xlsx with gold_* columns) or a gold file of
report files (.jsonl: one report a line, the figures a person read from it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..jobs import evaluate
from ..jobs.report import check_output
from .settings_options import add_settings_options, settings_from


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="measure reading quality on a gold file (a pool with gold_* columns, or "
                                    "a .jsonl of report files and their figures)")
    p.add_argument("gold", help="gold .csv/.xlsx: the pool's columns plus gold_net_profit, gold_revenue, … gold_risk; "
                                "or gold .jsonl: one report file a line (file, code, name, revenue, net_profit, …)")
    p.add_argument("-o", "--output", help="JSON report [default: GOLD_eval.json]")
    p.add_argument("--reports", metavar="DIR", help="folder of the report files a .jsonl gold names "
                                                    "[default: the gold file's folder]")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_settings_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    output = args.output or str(Path(args.gold).with_name(Path(args.gold).stem + "_eval.json"))
    check_output(output, args.gold, suffixes=(".json",))  # before the evaluation, never over the gold
    if Path(args.gold).suffix.lower() == ".jsonl":
        report = evaluate.evaluate_reports(args.gold, settings_from(args), reports=args.reports,
                                           progress=not args.no_progress)
        print(evaluate.report_table(report))
    else:
        report = evaluate.evaluate(args.gold, settings_from(args), progress=not args.no_progress)
        print(evaluate.table(report))
    print(f"→ {evaluate.write(report, output)}")
    return 1 if report["errors"] else 0
