"""``python -m bench news OUT.csv``: a gold set of real broker research notes for ``xladdin eval``,
built at run time from ``../shared/data`` (never committed) and the hand labels in
``bench/news_labels.json`` (the net profit each note reports, read by a person).

Also prints what code alone reads (``figures.read_figures``): right, wrong or missing on the notes
that state a figure, and figures read from notes that state none.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from xladdin.jobs.evaluate import close_enough
from xladdin.reading.figures import read_figures

from .common import SHARED_DATA

DATA = SHARED_DATA / "cfbenchmark"
LABELS = Path(__file__).parent / "news_labels.json"
HEADER = ["代码", "名称", "财报摘要", "gold_net_profit"]


def notes(which: str = "labels") -> list[tuple[str, str, float | None]]:
    """(key, text, gold net profit in 亿元 or None) for every note of one label set: ``labels`` (the
    sample code's patterns were written from) or ``labels_after`` (labelled afterwards, never tuned on)."""
    labels = json.loads(LABELS.read_text(encoding="utf-8"))[which]
    texts: dict[str, list[str]] = {}
    out = []
    for key, gold in labels.items():
        name, line = key.rsplit(":", 1)
        if name not in texts:
            with (DATA / name).open(encoding="utf-8") as f:
                texts[name] = [json.loads(raw)["input"] for raw in f]
        out.append((key, texts[name][int(line)], gold))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench news OUT.csv", file=sys.stderr)
        return 2
    if not DATA.is_dir():
        print(f"{DATA} not present: nothing written")
        return 1
    sets = {"first sample": notes("labels"), "second sample (not tuned on)": notes("labels_after")}
    with open(argv[0], "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        k = 0
        for label, rows in sets.items():
            for key, text, gold in rows:
                k += 1
                w.writerow([f"{k:06d}", f"研报{key}", text, "" if gold is None else gold])
            print(f"{label}: {_code_alone(rows)}")
    print(f"wrote {argv[0]}: {k} notes")
    return 0


def _code_alone(rows: list[tuple[str, str, float | None]]) -> str:
    right = wrong = missing = false_reads = 0
    for key, text, gold in rows:
        read = read_figures(text).get("net_profit")
        value = None if read is None else read.value
        if gold is None:
            false_reads += value is not None
        elif value is None:
            missing += 1
            print(f"  not read, gold {gold:g}: {key}")
        elif close_enough(value, gold, money=True):
            right += 1
        else:
            wrong += 1
            print(f"  code read {value:g}, gold {gold:g}: {key} 「{read.quote if read else ''}」")
    stated = sum(g is not None for _, _, g in rows)
    return (f"code alone {right}/{stated} right, {wrong} wrong, {missing} not read; "
            f"{false_reads} figures read from the {len(rows) - stated} notes that state none")
