"""``python -m bench documents``: reading a report file, side by side — pypdfium2 (shipped) and
pdfplumber (``pip install pdfplumber``) on the same PDFs in one run: seconds per document and per
page, and whether code then finds the key-figure tables. PDFs: the real annual report in
``../shared/data`` when present, and one generated here (200 pages, tables on pages 5-6).
Writes ``bench/results/documents.json``."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "documents.json"
REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "ashare" / "annual_reports"


def generated(path: Path, pages: int = 200) -> Path:
    sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
    from test_documents import PAGE_1, PAGE_2, make_pdf

    filler = [f"第{i}行 公司坚持稳健经营，持续加大研发投入，营业网点{i}个，员工{i * 7}人。" for i in range(40)]
    return make_pdf(path, [filler] * 4 + [PAGE_1, PAGE_2] + [filler] * (pages - 6))


def pdfium_text(path: Path) -> str:
    from xladdin.reading.documents import _pdf

    return _pdf(path, path.read_bytes())


def plumber_text(path: Path) -> str:
    import pdfplumber

    with pdfplumber.open(path) as pdf:
        return "\f".join(page.extract_text() or "" for page in pdf.pages)


def measure(path: Path) -> dict:
    from xladdin.tasks.tables import read_tables

    out = {"file": path.name}
    for name, read in (("pypdfium2", pdfium_text), ("pdfplumber", plumber_text)):
        try:
            t0 = time.perf_counter()
            text = read(path)
            seconds = time.perf_counter() - t0
        except ImportError:
            out[name] = None
            continue
        pages = text.count("\f") + 1
        t1 = time.perf_counter()
        tables = read_tables(text)
        out[name] = {"pages": pages, "seconds": round(seconds, 3), "ms_per_page": round(1000 * seconds / pages, 2),
                     "tables_ms": round(1000 * (time.perf_counter() - t1), 2),
                     "figures_found": sorted(tables)}
        print(f"{path.name}: {name} {seconds:.2f} s, {pages} pages, figures {sorted(tables)}", flush=True)
    a, b = out.get("pypdfium2"), out.get("pdfplumber")
    if a and b:
        out["pdfplumber_over_pypdfium2"] = round(b["seconds"] / a["seconds"], 1)
    return out


def main(argv: list[str] | None = None) -> None:
    files = sorted(REAL.glob("*.pdf")) if REAL.is_dir() else []
    with tempfile.TemporaryDirectory() as tmp:
        files.append(generated(Path(tmp) / "generated_200_pages.pdf"))
        runs = [measure(p) for p in files]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": runs}, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"→ {RESULTS}")


if __name__ == "__main__":
    main()
