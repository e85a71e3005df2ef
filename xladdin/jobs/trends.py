"""``xladdin compare SOURCE -o OUT.xlsx``: industries and companies compared over the years.

SOURCE is a screen report (what ``xladdin screen`` wrote: .xlsx, .csv or .json) or a folder of report
files. A folder's files are all read, several of one company too (``--reports`` screens only the newest
of each; a trend needs them all): code reads each one's figures and period, no model is asked, and
``--pool`` gives each company's industry (its code column and 行业). The workbook has the industries
with a column per period and their change, with a chart of the years side by side (Industries), each
company's figures over its periods (Companies), and the tidy table pandas gives (Figures).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core import Cache, texts_or_errors
from ..errors import InputError, XladdinError
from ..reading.documents import SUFFIXES, ReportPath, Reports, with_text
from ..reading.pool import header_field, normalize_code, read_pool
from ..settings import Settings
from ..tasks.base import Provenance
from ..tasks.screen import ScreenResult, ScreenTask
from .changes import code_column, read_screen
from .compare import HEADER, figure_table, trend_table
from .report import check_output, save_workbook, write_by_period, xlsx_text

MAX_FILES = 100_000  # report files one folder may give
CODE_ONLY = "程序读数 code's reading"  # what read a folder's reports: no model
_TITLES = {field: info.title for field, info in ScreenResult.model_fields.items()}


def read_rows(source: str | Path, settings: Settings, pool: str | Path | None = None, progress: bool = True,
              skipped: list[tuple[str, str]] | None = None) -> list[tuple[str, str, Any, Any, dict[str, Any]]]:
    """(code, name, industry, period, {result field: value}) of each row of a screen report, or of each
    report file of a folder (read by code); a file that cannot be read goes to ``skipped`` with why."""
    path = Path(source).expanduser()
    if path.is_dir():
        return _folder_rows(path.resolve(), settings, _industries(pool), progress,
                            skipped if skipped is not None else [])
    if not path.is_file():
        raise InputError("source", f"{source}: no such report or folder")
    return _report_rows(path, _industries(pool))


def _industries(pool: str | Path | None) -> dict[str, Any]:
    """Each code's industry from a pool file (its code and industry columns)."""
    if pool is None:
        return {}
    read = read_pool(pool)
    if "industry" not in read.mapping:
        raise InputError("pool", f"{Path(pool).name} has no industry column (行业, 所属行业, industry …)")
    out = {}
    for record in read.records():
        try:
            out[normalize_code(record.get("code"))[:6]] = record.get("industry")
        except InputError:
            continue
    return out


def _report_rows(path: Path, industries: dict[str, Any]) -> list[tuple[str, str, Any, Any, dict[str, Any]]]:
    saved = read_screen(path)
    code_at = code_column(saved)
    industry_at = next((c for c in saved.columns if header_field(c) == "industry"), None)
    out = []
    for row in saved.rows:
        code = str(row.get(code_at) or "").strip()
        figures = {field: row.get(title) for field, title in _TITLES.items()}
        industry = row.get(industry_at) if industry_at else industries.get(code[:6])
        out.append((code, str(row.get(_TITLES["name"]) or ""), industry, row.get(_TITLES["period"]), figures))
    return out


def _folder_rows(folder: Path, settings: Settings, industries: dict[str, Any], progress: bool,
                 skipped: list[tuple[str, str]]) -> list[tuple[str, str, Any, Any, dict[str, Any]]]:
    """Each report file of ``folder`` (absolute) read by the reader processes, bounded in memory as the
    screen's are; a file that cannot be read (not a PDF, encrypted, scanned, too large) is passed over with
    its reason, the others compared."""
    files = sorted(Path(e.path) for e in os.scandir(folder)
                   if e.is_file() and not e.name.startswith(".") and Path(e.name).suffix.lower() in SUFFIXES)
    if not files:
        raise InputError("source", f"{folder}: no report files ({', '.join(SUFFIXES)})")
    if len(files) > MAX_FILES:
        raise InputError("source", f"{folder}: {len(files):,} report files, over {MAX_FILES:,}")
    allowed = Reports.of(settings, None, folder)
    if progress:
        print(f"reading {len(files)} report files in {folder} …", file=sys.stderr, flush=True)
    texts = texts_or_errors(lambda: Cache(settings.cache_dir, enabled=not settings.no_cache), allowed,
                            settings.readers, settings.reader_memory_mib)(files)
    task = ScreenTask()
    provenance = Provenance(model=CODE_ONLY, task_version=task.version, cached=False)
    out = []
    for path in _bar(files, progress):
        code = (re.findall(r"(?<!\d)(\d{6})(?!\d)", path.name) or [path.stem])[0]
        name = _name_of(path.stem, code)
        text = texts[path]
        try:
            if isinstance(text, XladdinError):
                raise text
            record = with_text({"code": code, "name": name}, ReportPath(str(path), allowed), text)
            result = task.without_answer(task.parse(record), XladdinError("no model asked"), provenance)
        except XladdinError as e:
            skipped.append((path.name, str(e)))
            continue
        out.append((code, name, industries.get(code), result.period, result.model_dump()))
    if not out:
        raise InputError("source", f"{folder}: no report file could be read (" +
                         "; ".join(f"{name}: {why}" for name, why in skipped[:3]) + ")")
    return out


def _name_of(stem: str, code: str) -> str:
    """A company's name as a file names it (``600519_贵州茅台_2020``: 贵州茅台)."""
    parts = [p for p in re.split(r"[_\-\s]+", stem.replace(code, "")) if p and not re.fullmatch(r"\d{4}.*", p)]
    return parts[0] if parts else stem


def _bar(files: list[Path], progress: bool) -> Iterable[Path]:
    if not progress:
        return files
    from tqdm import tqdm

    return tqdm(files, desc="reports", unit="file")


def compare_file(source: str | Path, output: str | Path, settings: Settings, *, pool: str | Path | None = None,
                 progress: bool = True) -> Path:
    """The comparison workbook of ``source`` (a screen report or a folder of report files) at ``output``."""
    if Path(output).suffix.lower() != ".xlsx":
        raise InputError("output", f"{Path(output).name}: the comparison is a workbook: name a .xlsx file")
    out = check_output(output, source if Path(source).is_file() else None, pool)
    skipped: list[tuple[str, str]] = []
    rows = read_rows(source, settings, pool, progress, skipped)
    write_comparison(out, rows, source, skipped)
    for name, why in skipped:
        print(f"skipped {name}: {why}", file=sys.stderr)
    return out


def write_comparison(path: Path, rows: list[tuple[str, str, Any, Any, dict[str, Any]]], source: Any,
                     skipped: list[tuple[str, str]] | None = None) -> None:
    skipped = skipped or []
    from openpyxl import Workbook
    from openpyxl.styles import Alignment, Font

    wb = Workbook()
    ws = wb.active
    ws.title = "Industries"
    table = figure_table((industry, period, figures, code) for code, _, industry, period, figures in rows)
    passed = f"; {len(skipped)} files passed over (the Skipped sheet says why)" if skipped else ""
    ws.append([xlsx_text(f"{len(rows)} reports from {source}{passed}")])
    write_by_period(ws, table)
    companies = wb.create_sheet("Companies")
    header, trend = trend_table((code, name, period, figures) for code, name, _, period, figures in rows)
    companies.append([xlsx_text(h) for h in header])
    for row in trend:
        companies.append([xlsx_text(v) for v in row])
        for cell in companies[companies.max_row][3:]:
            cell.number_format = "0.00"
    _style_header(companies, Font, Alignment)
    companies.column_dimensions["B"].width = 14
    companies.column_dimensions["C"].width = 26
    figures = wb.create_sheet("Figures")
    figures.append(HEADER)
    for row in table:
        figures.append([xlsx_text(v) for v in row])
    _style_header(figures, Font, Alignment)
    figures.column_dimensions["A"].width = 16
    figures.column_dimensions["B"].width = 26
    if skipped:
        passed_over = wb.create_sheet("Skipped")
        passed_over.append(["文件 file", "原因 why"])
        for name, why in skipped:
            passed_over.append([xlsx_text(name), xlsx_text(why)])
        _style_header(passed_over, Font, Alignment)
        passed_over.column_dimensions["B"].width = 100
    save_workbook(wb, path)


def _style_header(ws: Any, font: Any, alignment: Any) -> None:
    from openpyxl.utils import get_column_letter

    for cell in ws[1]:
        cell.font = font(bold=True)
        cell.alignment = alignment(wrap_text=True)
    for j in range(1, ws.max_column + 1):
        letter = get_column_letter(j)
        ws.column_dimensions[letter].width = max(ws.column_dimensions[letter].width or 0, 12)
    ws.freeze_panes = "A2"
