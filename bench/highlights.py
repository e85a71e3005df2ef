"""How far the model's highlights can be trusted: ``python -m bench highlights [--engine-url URL]``.

Real broker notes (``../shared/data/ashare/cfbenchmark/basic_summary.jsonl``, the ``input`` texts)
through ``xladdin highlights``'s job with the configured engine (default: the embedded starter
model; ``--engine-url`` for a server): how many highlights the model wrote, how many stood, how
many numbers it wrote and how many of them neither code nor the note gives (those highlights are
dropped), and how many rows code wrote alone; and the check alone on the notes' own sentences. Results:
``bench/results/highlights.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import openpyxl

from xladdin.jobs.pool_screen import highlights_file
from xladdin.settings import Settings

from .common import RESULTS, SHARED_DATA, machine, write_run

NOTES = SHARED_DATA / "cfbenchmark" / "basic_summary.jsonl"


def build_pool(path: Path, n: int) -> Path | None:
    """The first ``n`` broker notes as a pool (code column: the note's number)."""
    if not NOTES.is_file():
        return None
    with NOTES.open(encoding="utf-8") as f, path.open("w", encoding="utf-8", newline="") as out:
        w = csv.writer(out)
        w.writerow(["代码", "名称", "财报摘要"])
        for i, line in enumerate(f):
            if i >= n:
                break
            w.writerow([f"{i + 1:06d}", f"研报{i + 1}", json.loads(line)["input"]])
    return path


def checker(n: int) -> dict[str, Any]:
    """The check alone, no model: each sentence with a number of the first ``n`` notes, checked against its
    own note (every number is there: a flag is a false drop) and against the next note (a flag is right)."""
    from xladdin.reading.figures import read_figures
    from xladdin.reading.pool import required_text
    from xladdin.tasks.highlights import check, numbers

    with NOTES.open(encoding="utf-8") as f:
        notes = [required_text(json.loads(line)["input"], "input") for line, _ in zip(f, range(n + 1), strict=False)]
    own = other = flagged_own = flagged_other = 0
    for note, following in zip(notes, notes[1:], strict=False):
        for sentence in re.split(r"[。；;！!？?\n]", note):
            if numbers(sentence):
                own += 1
                flagged_own += bool(check(sentence, note, read_figures(note)))
                other += 1
                flagged_other += bool(check(sentence, following, read_figures(following)))
    return {"notes": len(notes) - 1, "sentences": own, "flagged_against_own_note": flagged_own,
            "flagged_against_another_note": flagged_other}


def measure(pool: Path, settings: Settings, out: Path) -> dict[str, Any]:
    summary = highlights_file(pool, out, settings, progress=True)
    wb = openpyxl.load_workbook(out)
    rows = list(wb["Results"].iter_rows(values_only=True))
    heads, body = rows[0], [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]
    run = dict(wb["Run"].values)
    alone = sum("亮点由程序" in (r["说明 notes"] or "") for r in body)
    written = run["highlights_kept"] + run["highlights_dropped"]
    checked, unverified = run["numbers_checked"], run["numbers_unverified"]
    return {"rows": summary.rows, "errors": summary.errors, "seconds": round(summary.seconds, 1),
            "model": run["model"], "task_version": run["task_version"], "columns": list(heads),
            "highlights_kept": run["highlights_kept"], "highlights_dropped": run["highlights_dropped"],
            "share_dropped": round(run["highlights_dropped"] / written, 3) if written else None,
            "numbers_checked": checked, "numbers_unverified": unverified,
            "share_numbers_verified": round(1 - unverified / checked, 3) if checked else None,
            "rows_written_by_code": alone, "without_answer": summary.without_answer}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench highlights", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=30, help="broker notes to write highlights for")
    p.add_argument("--engine-url", help="a server (default: the configured engine, else the starter model)")
    p.add_argument("--pool", help="a pool CSV of notes (--build-pool), for a machine without ../shared/data")
    p.add_argument("--build-pool", metavar="CSV", help="only write the notes' pool to CSV and stop")
    p.add_argument("--out", default=str(RESULTS / "highlights.json"))
    args = p.parse_args(argv)
    if args.build_pool:
        return 0 if build_pool(Path(args.build_pool), args.rows) else 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pool = Path(args.pool) if args.pool else build_pool(work / "notes.csv", args.rows)
        if pool is None:
            print(f"skipped: {NOTES} not present")
            return 0
        # the user's cache: the check runs after it, so a changed check is measured again without the model
        settings = Settings.load({"engine_url": args.engine_url})
        result = {"source": str(NOTES.relative_to(SHARED_DATA.parent)), "machine": machine(),
                  "checker": checker(200) if NOTES.is_file() else None,
                  **measure(pool, settings, work / "highlights.xlsx")}
    write_run(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k != "columns"}, ensure_ascii=False))
    return 0
