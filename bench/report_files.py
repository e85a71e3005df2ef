"""Report files at scale (``python -m bench report_files``): a pool whose every row names its own
report file, through ``xladdin screen --reports`` against the stand-in server, side by side in one
run: one reader process against one per core (the default), then a rerun from the cache; and the
Excel path: a cell per file, the calling thread's time on the first pass and on a recalculation
once every answer is in.

Beside them, the reading rate in the form of issue 43: the same files read whole by 2 processes with
pypdfium2 (the text of every page, nothing else), files per second, against ``xladdin screen --reports``'s
rows per second (``reading_over_every_page``).

Every file is distinct, its text too: copies of the annual-report PDFs in ``../shared/data`` (else
generated PDFs), each with a first page of its own (``copy 600000``), one name per code, so neither a
reader keyed by content nor a reading kept for a text serves another file. Results: ``bench/results/report_files.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import queue
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import RESULTS, SHARED_DATA, machine, write_run
from .excel_path import _server, fill

HEADLINE = ("cli.reading_over_every_page",)  # the numbers docs/BENCHMARKS.md gives for each earlier run

REPORTS = SHARED_DATA / "annual_reports"


def sources() -> list[bytes]:
    """The PDFs the copies are made from: the real annual reports where present, else generated ones."""
    found = sorted(REPORTS.glob("*.pdf")) if REPORTS.is_dir() else []
    if found:
        return [p.read_bytes() for p in found]
    from xladdin.testing import write_report_pdf

    with tempfile.TemporaryDirectory() as d:
        return [write_report_pdf(Path(d) / f"{i}.pdf", i).read_bytes() for i in range(6)]


def make_reports(folder: Path, n: int, pdfs: list[bytes]) -> list[str]:
    """``n`` distinct report files named by code (``600000_年报.pdf`` …), each one's text its own: a first
    page saying ``copy 600000`` (so nothing read of one file's text serves another's); returns the codes."""
    folder.mkdir(parents=True, exist_ok=True)
    codes = [f"{600000 + i:06d}" for i in range(n)]
    makers = [copy_maker(pdf) for pdf in pdfs[:n]]
    for i, code in enumerate(codes):
        (folder / f"{code}_年报.pdf").write_bytes(makers[i % len(makers)](code))
    return codes


def with_first_page(pdf: bytes, words: str) -> bytes:
    """``pdf`` with a page before its first that holds ``words`` (Helvetica, in its text layer)."""
    import ctypes
    import io

    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    doc = pdfium.PdfDocument(pdf)
    try:
        page = doc.new_page(595, 842, index=0)
        obj = pdfium_c.FPDFPageObj_NewTextObj(doc.raw, b"Helvetica", ctypes.c_float(12))
        text = (words + "\x00").encode("utf-16-le")
        pdfium_c.FPDFText_SetText(obj, (ctypes.c_ushort * (len(text) // 2)).from_buffer_copy(text))
        pdfium_c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, 50, 800)
        pdfium_c.FPDFPage_InsertObject(page.raw, obj)
        pdfium_c.FPDFPage_GenerateContent(page.raw)
        out = io.BytesIO()
        doc.save(out)
        return out.getvalue()
    finally:
        doc.close()


_PLACEHOLDER = "000000"


def copy_maker(pdf: bytes) -> Callable[[str], bytes]:
    """A function of a 6-digit code giving ``with_first_page(pdf, f"copy {code}")`` at the cost of a byte
    substitution: the first page is added once, with a placeholder code, and its content stream rewritten
    uncompressed in the same bytes (every object keeping its offset), so each copy is the template with
    the code's digits in place of the placeholder's (pdfium takes most of a second to save a large
    report; 5,400 copies of one took longer than a device call). Where the stream is not found as
    expected, each copy is saved by pdfium as before."""
    plain = _uncompressed_first_page(with_first_page(pdf, f"copy {_PLACEHOLDER}"))
    if plain is None:
        return lambda code: with_first_page(pdf, f"copy {code}")
    at = plain.find(f"copy {_PLACEHOLDER}".encode().hex().encode()) + len(b"copy ") * 2  # the digits' hex

    def make(code: str) -> bytes:
        if len(code) != len(_PLACEHOLDER) or not code.isdigit():
            return with_first_page(pdf, f"copy {code}")
        return plain[:at] + code.encode().hex().encode() + plain[at + 2 * len(code) :]

    return make


def _uncompressed_first_page(template: bytes) -> bytes | None:
    """``template`` with the Flate-compressed content stream that draws ``copy 000000`` rewritten as a
    plain one of the same length (a ``BT … Tj ET`` of its own, padded with spaces), checked by reading
    its first page back; ``None`` when no such stream is found or it does not read back."""
    import re
    import zlib

    import pypdfium2 as pdfium

    word = f"copy {_PLACEHOLDER}".encode().hex().encode()
    for m in re.finditer(rb"(\d+) 0 obj\s*<<(/Filter\s*/FlateDecode\s*/Length (\d+))>>\s*stream\r?\n", template):
        length = int(m.group(3))
        try:
            content = zlib.decompress(template[m.end() : m.end() + length])
        except zlib.error:
            continue
        if word.upper() not in content.upper():
            continue
        font = re.search(rb"(/\S+) 12 Tf", content)
        if font is None:
            return None
        plain = b"BT " + font.group(1) + b" 12 Tf 50 800 Td <" + word + b"> Tj ET"
        if len(plain) > length:
            return None
        head = b"/Length " + str(length).encode()
        out = (template[: m.start(2)] + head.ljust(len(m.group(2))) + template[m.end(2) : m.end()]
               + plain.ljust(length) + template[m.end() + length :])
        doc = pdfium.PdfDocument(out)
        try:
            first = doc[0].get_textpage().get_text_range()
        finally:
            doc.close()
        return out if first.strip() == f"copy {_PLACEHOLDER}" else None
    return None


def write_pool(path: Path, codes: list[str]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["代码", "名称", "行业", "市盈率TTM", "ROE"])
        w.writerows([code, f"公司{code}", "制造", "20", "10"] for code in codes)
    return path


# The CLI process's own peak resident memory, KiB, as an expression its ``-c`` runs: on Linux VmHWM, its own
# since it began the program (ru_maxrss there keeps the high-water mark of the process it was forked from, a
# bench holding its PDFs); elsewhere ru_maxrss (in bytes on macOS).
PEAK_RSS_KIB = ("lambda: next((int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')), 0) "
                "if sys.platform.startswith('linux') else __import__('resource').getrusage(0).ru_maxrss "
                "// (1024 if sys.platform == 'darwin' else 1)")


def cli_run(url: str, pool: Path, reports: Path, cache: Path, out: Path, readers: int | None) -> dict[str, Any]:
    """``xladdin screen POOL --reports DIR`` in a process of its own: wall seconds, errors, files parsed,
    and the client's peak memory (its reader processes apart)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    env.update(XLADDIN_ENGINE_URL=url, XLADDIN_CACHE_DIR=str(cache))
    if readers:
        env["XLADDIN_READERS"] = str(readers)
    code = ("import sys; from xladdin.cli.main import main; rc = main(sys.argv[1:]); "
            f"print('peak_rss_kib', ({PEAK_RSS_KIB})(), file=sys.stderr); sys.exit(rc)")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, "screen", str(pool), "--reports", str(reports), "-o", str(out),
                           "--no-progress"], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"xladdin screen failed ({proc.returncode}): {proc.stderr[-2000:]}")
    run = json.loads(out.read_text(encoding="utf-8"))["run"]
    peak = next((int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("peak_rss_kib")), 0)
    return {"seconds": round(seconds, 3), "rows": run["rows"], "errors": run["errors"],
            "files_read": run["files_read"], "files_from_store": run["files_from_store"],
            "results_recalled": run.get("results_recalled", 0),
            "rows_per_s": round(run["rows"] / seconds, 2), "client_peak_rss_mib": round(peak / 1024, 1)}


def every_page(path: str) -> int:
    """The text of every page of one PDF, as a plain reader takes it (pypdfium2): its length."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(path)
    chars = 0
    for i in range(len(doc)):
        page = doc[i]
        textpage = page.get_textpage()
        chars += len(textpage.get_text_range())
        textpage.close()
        page.close()
    doc.close()
    return chars


def every_page_arm(reports: Path, processes: int = 2) -> dict[str, Any]:
    """The files read whole by ``processes`` processes: seconds and files per second."""
    import multiprocessing

    files = sorted(str(p) for p in reports.glob("*.pdf"))
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(every_page, files, chunksize=1)
    seconds = time.perf_counter() - t0
    return {"arm": f"every_page_{processes}_processes", "seconds": round(seconds, 3), "rows": len(files),
            "rows_per_s": round(len(files) / seconds, 2)}


def cli_arms(url: str, work: Path, rows: int, pdfs: list[bytes]) -> dict[str, Any]:
    reports = work / "reports"
    pool = write_pool(work / "pool.csv", make_reports(reports, rows, pdfs))
    runs = [every_page_arm(reports)]
    print(json.dumps(runs[-1]), flush=True)
    for order in (("one_reader", "per_core"), ("per_core", "one_reader")):  # each arm first once, second once
        for arm in order:
            cache = work / f"cache-{arm}-{len(runs)}"
            run = cli_run(url, pool, reports, cache, work / "out.json", 1 if arm == "one_reader" else None)
            runs.append({"arm": arm, **run})
            print(json.dumps(runs[-1]), flush=True)
            if arm == "per_core" and not any(r["arm"] == "rerun" for r in runs):
                rerun = cli_run(url, pool, reports, cache, work / "out.json", None)
                runs.append({"arm": "rerun", **rerun})
                print(json.dumps(runs[-1]), flush=True)
            shutil.rmtree(cache, ignore_errors=True)
    runs.append(every_page_arm(reports))
    print(json.dumps(runs[-1]), flush=True)
    best = {arm: min(r["seconds"] for r in runs if r["arm"] == arm)
            for arm in ("one_reader", "per_core", "every_page_2_processes")}
    first = next(r for r in runs if r["arm"] == "per_core")
    rerun = next(r for r in runs if r["arm"] == "rerun")
    return {"rows": rows, "runs": runs, "per_core_over_one_reader": round(best["one_reader"] / best["per_core"], 2),
            "reading_over_every_page": round(best["every_page_2_processes"] / best["per_core"], 2),
            "rerun_over_first": round(rerun["seconds"] / first["seconds"], 3),
            "rerun_files_parsed": rerun["files_read"]}


class _Caller:
    def __init__(self, address: str, book: str):
        self.address = address
        self.sheet = type("Sheet", (), {"name": "Pool", "book": type("Book", (), {"name": Path(book).name,
                                                                                     "fullname": book})()})()


def excel_arm(url: str, work: Path, cells_n: int) -> dict[str, Any]:
    """A cell per report file, called as Excel calls it (caller, recalculated when its answer is in):
    the calling thread's time in the first pass, until every answer is in, and in a recalculation."""
    from xladdin.core.batcher import Batcher
    from xladdin.excel import udfs
    from xladdin.settings import Settings
    from xladdin.sheet.functions import CellRuntime
    from xladdin.testing import write_report_pdf

    small = [write_report_pdf(work / f"source-{i}.pdf", i).read_bytes() for i in range(6)]  # the calling thread
    codes = make_reports(work, cells_n, small)  # only stats a file: small ones measure it as well as large
    book = str(work / "pool.xlsx")  # the workbook beside its reports
    settings = Settings.load({"engine_url": url, "cache_dir": work / "excel-cache"}, env={})
    recalc: queue.SimpleQueue[Any] = queue.SimpleQueue()
    runtime = CellRuntime(settings, batcher=Batcher.from_settings(settings),
                          told=lambda settled: recalc.put(settled.result().caller))
    udfs.set_runtime(runtime)
    values = [[float(c), f"公司{c}", "制造", 20.0, 10.0, None, f"{c}_年报.pdf"] for c in codes]
    callers = [_Caller(f"$H${i + 2}", book) for i in range(cells_n)]
    try:
        t0 = time.perf_counter()
        sheet = fill(values, callers, recalc)
        filled = time.perf_counter() - t0
        final, first_pass, calling = sheet.final, sheet.first_pass_s, sheet.calling_s
        t = time.perf_counter()
        again = [udfs.QWEN_SCREEN([row], False, None, caller)[0] for row, caller in zip(values, callers, strict=True)]
        recalculation = time.perf_counter() - t
        snap = runtime.batcher.reader.snapshot()
    finally:
        udfs.set_runtime(None)
        runtime.close()
    errors = sum(str(v[0]).startswith("#QWEN") for v in final.values())
    return {"cells": cells_n, "first_pass_calling_s": round(first_pass, 3),
            "calling_until_filled_s": round(calling, 3), "filled_s": round(filled, 2),
            "recalculation_s": round(recalculation, 3), "answers": len(final), "errors": errors,
            "recalculation_same": again == [final[i] for i in range(cells_n)], "files_read": snap["files_read"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench report_files", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100, help="report-file rows of the CLI arms")
    p.add_argument("--cells", type=int, default=500, help="report-file cells of the Excel arm")
    p.add_argument("--delay-ms", default="10,50", help="the stand-in server's answer delay, low,high")
    p.add_argument("--out", default=str(RESULTS / "report_files.json"))
    args = p.parse_args(argv)
    low, high = (float(x) / 1000 for x in args.delay_ms.split(","))
    pdfs = sources()
    server, url = _server(low, high)
    try:
        with tempfile.TemporaryDirectory() as d:
            cli_part = cli_arms(url, Path(d) / "cli", args.rows, pdfs)
        with tempfile.TemporaryDirectory() as d:
            excel_part = excel_arm(url, Path(d), args.cells)
    finally:
        server.kill()
        server.join()
    out = {"files": "copies of ../shared/data's annual reports" if REPORTS.is_dir() else "generated PDFs",
           "server": f"bench/answer_server.py, {args.delay_ms} ms", "machine": machine(), "cli": cli_part,
           "excel": excel_part, "bench_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    write_run(args.out, out)
    print(f"report files: {cli_part['reading_over_every_page']}x the rate of 2 processes reading every page; "
          f"{cli_part['per_core_over_one_reader']}x with a reader per core; rerun "
          f"{cli_part['rerun_over_first']} of the first run ({cli_part['rerun_files_parsed']} files parsed); Excel: "
          f"{excel_part['first_pass_calling_s']} s calling thread on the first pass, "
          f"{excel_part['recalculation_s']} s for a recalculation")
    return 0


def render(d: dict[str, Any]) -> list[str]:
    """Section 12 of docs/BENCHMARKS.md."""
    c, e = d["cli"], d["excel"]
    lines = ["## 12. Report files at scale (`python -m bench report_files`)", "",
             f"Every row names its own report file ({d['files']}, each made distinct), the stand-in server "
             f"({d['server']}), one run on {d['machine'].get('cpus')} CPUs; each CLI arm first once and second once.",
             "", "| arm | seconds | rows/s | errors | files parsed | from the cache | client peak RSS (MiB) |",
             "|---|---|---|---|---|---|---|"]
    for r in c["runs"]:
        lines.append(f"| {r['arm']} | {r['seconds']} | {r['rows_per_s']} | {r.get('errors', '')} "
                     f"| {r.get('files_read', r['rows'])} | {r.get('files_from_store', '')} "
                     f"| {r.get('client_peak_rss_mib', '')} |")
    if "reading_over_every_page" in c:
        lines += ["", f"`xladdin screen --reports` (a reader per core, the stand-in answering) screens "
                  f"**{c['reading_over_every_page']}×** as many files a second as 2 processes reading every page "
                  "of them with pypdfium2 and doing nothing else (goal: 3×)."]
    lines += ["", f"A reader per core: **{c['per_core_over_one_reader']}×** one reader's speed on the same "
              f"{c['rows']} rows; a rerun from the cache: **{c['rerun_over_first']}** of the first run, "
              f"{c['rerun_files_parsed']} files parsed.", "",
              f"The Excel path, {e['cells']} cells each naming its own file: the calling thread spent "
              f"**{e['first_pass_calling_s']} s** on the first pass, {e['calling_until_filled_s']} s in all until "
              f"every cell was filled ({e['filled_s']} s, {e['answers']} answers, {e['errors']} errors), and "
              f"**{e['recalculation_s']} s** on a recalculation once every answer was in (same values: "
              f"{e['recalculation_same']}; {e['files_read']} files parsed).", ""]
    return lines
