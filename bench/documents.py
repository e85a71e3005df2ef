"""``python -m bench documents``: reading an annual-report PDF, side by side in one run on the same files —
the text layer alone (pypdfium2, the tables read line by line) and as shipped (the text, then the
key-figure tables by their cells with pdfplumber where the line reading leaves a key figure out): seconds
per report, the key figures found, and on how many reports the cells were read. ``--whole-pdfplumber``
adds pdfplumber's text of every page (the library alone; slow). PDFs: the annual reports of
``../shared/data`` when present, else generated ones. Writes ``bench/results/documents.json``; rendered as
section 15 of docs/BENCHMARKS.md."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

from .common import SHARED_DATA, machine, write_run

HEADLINE = ('shipped_over_text_alone',)  # the numbers docs/BENCHMARKS.md gives for each earlier run

RESULTS = Path(__file__).parent / "results" / "documents.json"
REAL = SHARED_DATA / "annual_reports"


def _text_alone(path: Path) -> str:
    from xladdin.reading import documents, layout

    with mock.patch.object(layout, "with_tables", lambda doc, pages, name="": pages):
        return documents._pdf(path, path.read_bytes())


def _shipped(path: Path) -> str:
    from xladdin.reading import documents

    return documents._pdf(path, path.read_bytes())


def _whole_pdfplumber(path: Path) -> str:
    import pdfplumber

    with pdfplumber.open(path) as pdf:
        return "\f".join(page.extract_text() or "" for page in pdf.pages)


def measure(files: list[Path], whole: bool) -> dict[str, Any]:
    from xladdin.reading.tables import PIPE, ROWS, read_key_tables

    arms = [("text alone", _text_alone), ("shipped", _shipped)] + ([("pdfplumber whole", _whole_pdfplumber)]
                                                                  if whole else [])
    out: dict[str, Any] = {"files": len(files), "key_figures": len(ROWS) * len(files)}
    for name, read in arms:
        seconds, found, cells = 0.0, 0, 0
        for path in files:
            t0 = time.perf_counter()
            text = read(path)
            seconds += time.perf_counter() - t0
            found += len(read_key_tables(text).rows.keys() & ROWS.keys())
            cells += f"\n{PIPE} " in text
        out[name] = {"seconds": round(seconds, 2), "s_per_report": round(seconds / len(files), 3),
                     "key_figures_found": found, "reports_read_by_cells": cells}
        print(f"{name}: {seconds:.1f} s for {len(files)} reports, key figures found {found}", flush=True)
    out["shipped_over_text_alone"] = round(out["shipped"]["seconds"] / out["text alone"]["seconds"], 2)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench documents")
    p.add_argument("--whole-pdfplumber", action="store_true", help="also pdfplumber's text of every page")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        files = sorted(REAL.glob("*.pdf")) if REAL.is_dir() else []
        source = "../shared/data annual reports"
        if not files:
            from xladdin.testing import write_report_pdf

            files = [write_report_pdf(Path(tmp) / f"{i}.pdf", i) for i in range(6)]
            source = "generated reports"
        data = {"source": source, "machine": machine(), **measure(files, args.whole_pdfplumber)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_run(RESULTS, data)
    print(f"→ {RESULTS}")


def render(d: dict[str, Any]) -> list[str]:
    """Section 15 of docs/BENCHMARKS.md."""
    if "files" not in d:  # results of an earlier form of this benchmark
        return []
    lines = ["## 15. Reading annual reports (`python -m bench documents`)", "",
             f"{d['files']} {d['source']}, each read whole by each arm in one run on {d['machine'].get('cpus')} CPUs "
             "(one process): the text layer alone (the key-figure tables read line by line), and as shipped (then the "
             "tables by their cells, pdfplumber on the pages that title them, where the line reading leaves a key "
             "figure out). Key figures found: of the six table rows code reads (营业收入, 归母净利润, 扣非净利润, "
             "经营现金流, EPS, ROE) per report; whether each is right is `xladdin eval`'s, against the hand-taken "
             "gold of the same reports.", "",
             "| arm | seconds | s per report | key figures found | reports read by cells |", "|---|---|---|---|---|"]
    for arm in ("text alone", "shipped", "pdfplumber whole"):
        if arm in d:
            r = d[arm]
            lines.append(f"| {arm} | {r['seconds']} | {r['s_per_report']} | {r['key_figures_found']} of "
                         f"{d['key_figures']} | {r['reports_read_by_cells']} |")
    lines += ["", f"As shipped the reports take **{d['shipped_over_text_alone']}×** the time of the text alone.", ""]
    return lines


if __name__ == "__main__":
    main()
