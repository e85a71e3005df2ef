"""Annotated reports: the input rows in input order with the verdict beside
each, as .xlsx (coloured, frozen header, Summary with a chart, Run sheet),
.csv (plus a ``.run.json`` beside it) or .json.

Numbers are written as numbers. Text is made safe for its format, and only
there: in ``.xlsx`` a text starting with ``=`` is stored as text (never a
formula), characters an .xlsx cannot hold are dropped and a cell is cut at
Excel's 32,767 characters; in ``.csv``, which Excel evaluates on opening, a
text starting with ``=``, ``+``, ``-``, ``@``, tab or CR gets a leading
apostrophe; ``.json`` is written as is. A writer that fails anyway never loses
the run: the rows are saved as JSON beside the requested file.
"""

from __future__ import annotations

import csv
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from .changes import Changes

from ..errors import InputError, XladdinError, error_text
from ..reading.pool import Pool
from .compare import by_period, chart_figure, from_results, industry_name

ERROR_HEADER = "错误 error"
RISK_FILLS = {"高": "FFC7CE", "中": "FFEB9C", "低": "C6EFCE"}
_DANGEROUS = ("=", "+", "-", "@", "\t", "\r")
XLSX_CELL_CHARS = 32_767
CHART_ROWS = 14  # rows the Summary's risk chart covers (6 cm)
_XLSX_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # what the .xlsx XML cannot hold


def neutralize(value: Any) -> Any:
    """A text Excel would evaluate when it opens a CSV, made plain text (leading apostrophe)."""
    if isinstance(value, str) and value.startswith(_DANGEROUS):
        return "'" + value
    return value


def xlsx_text(value: Any) -> Any:
    """A text as an .xlsx cell can hold it."""
    if isinstance(value, str):
        value = _XLSX_ILLEGAL.sub("", value)
        if len(value) > XLSX_CELL_CHARS:
            value = value[: XLSX_CELL_CHARS - 1] + "…"
    return value


def table(pool: Pool, results: Sequence[Any], result_model: type[BaseModel]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows of the report: input columns, result columns, error column."""
    heads, verdicts = verdict_table(results, result_model)
    rows = [row + verdict for row, verdict in zip(pool.typed_rows(), verdicts, strict=True)]
    return list(pool.columns) + heads, rows


def verdict_table(results: Sequence[Any], result_model: type[BaseModel]) -> tuple[list[str], list[list[Any]]]:
    """The verdict columns (the result model's headers, then the error column) and their rows."""
    heads = result_model.headers()  # type: ignore[attr-defined]
    rows = [[None] * len(heads) + [error_text(res)] if isinstance(res, XladdinError) else res.cells() + [None]
            for res in results]
    return heads + [ERROR_HEADER], rows


REPORT_SUFFIXES = (".xlsx", ".csv", ".json")


def report_path(path: str | Path) -> Path:
    """``path`` when its suffix names a report format."""
    path = Path(path)
    if path.suffix.lower() not in REPORT_SUFFIXES:
        raise InputError("output", f"{path.name}: expected .xlsx, .csv or .json")
    return path


def check_output(path: str | Path, *inputs: str | Path | None, suffixes: tuple[str, ...] = ()) -> Path:
    """Refuse an output this module cannot write — before any row is screened: a wrong suffix (one of
    ``suffixes`` when given: a command that writes one format), a directory, one of the command's
    ``inputs`` (never written over), a folder that cannot be created or written."""
    path = report_path(path)
    if suffixes and path.suffix.lower() not in suffixes:
        raise InputError("output", f"{path.name}: this command writes {' or '.join(suffixes)}: name such a file")
    if path.is_dir():
        raise InputError("output", f"{path} is a directory: name a report file, e.g. {path / 'report.xlsx'}")
    for given in inputs:
        if given is not None and path.exists() and Path(given).exists() and os.path.samefile(path, given):
            raise InputError("output", f"{path} is one of the command's inputs ({Path(given).name}): name another "
                             "file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".xladdin-check-"):
            pass
        if path.exists() and not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is read-only")
    except OSError as e:
        raise InputError("output", f"cannot write {path}: {e.strerror or e}") from None
    return path


def write_report(path: str | Path, pool: Pool, results: Sequence[Any], result_model: type[BaseModel],
                 run: dict[str, Any], kept: str | None = None, changes: Changes | None = None) -> Path:
    """Write the report (its folder checked before the run: ``check_output``); if that fails,
    save the rows as JSON beside it and say where. ``kept``: what the cache holds of the run, said
    when neither can be written (``pool_screen.cache_kept``). ``changes``: what changed since an earlier
    report (``--compare``): a Changes sheet, the ``changes`` of a .json, a ``.changes.json`` beside a .csv."""
    path = report_path(path)
    header, rows = table(pool, results, result_model)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_whole(path, header, rows, results, pool, run, changes)
    except Exception as e:
        rescue = path.with_name(path.stem + ".rescued.json")
        why = f"cannot write {path.name} ({e.__class__.__name__}: {e})"
        try:
            _write_whole(rescue, header, rows, results, pool, run, changes)
        except Exception as e2:
            raise XladdinError(f"{why}, nor the rows to {rescue.name} ({e2.__class__.__name__}: {e2}): "
                               f"{kept or 'free some space and run the same command again'}") from None
        raise XladdinError(f"{why}; the report was saved as {rescue}") from None
    return path


def _write_whole(path: Path, header: list[str], rows: list[list[Any]], results: Sequence[Any], pool: Pool,
                 run: dict[str, Any], changes: Changes | None = None) -> None:
    """Written to a temporary file beside ``path`` and moved into place: a failed write never leaves a
    truncated report (nor replaces a good one)."""
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    beside = (".run.json", ".changes.json")
    try:
        _write(tmp, header, rows, results, pool, run, changes)
        os.replace(tmp, path)
        if path.suffix.lower() == ".csv":
            for suffix in beside:
                if tmp.with_suffix(suffix).exists():
                    os.replace(tmp.with_suffix(suffix), path.with_suffix(suffix))
    finally:
        for leftover in (tmp, *(tmp.with_suffix(s) for s in beside)):
            leftover.unlink(missing_ok=True)


def _write(path: Path, header: list[str], rows: list[list[Any]], results: Sequence[Any], pool: Pool,
           run: dict[str, Any], changes: Changes | None = None) -> None:
    suffix = path.suffix.lower()
    if suffix == ".xlsx":
        _write_xlsx(path, header, rows, results, pool, run, changes)
    elif suffix == ".csv":
        with path.open("w", encoding="utf-8-sig", newline="") as f:
            w = csv.writer(f)
            w.writerow([neutralize(h) for h in header])
            w.writerows([neutralize(v) for v in r] for r in rows)
        path.with_suffix(".run.json").write_text(json.dumps(run, ensure_ascii=False, indent=2), encoding="utf-8")
        if changes is not None:
            path.with_suffix(".changes.json").write_text(json.dumps(changes.as_dict(), ensure_ascii=False, indent=1),
                                                         encoding="utf-8")
    else:
        records = [dict(zip(header, r, strict=True)) for r in rows]
        whole = {"run": run, "rows": records, **({"changes": changes.as_dict()} if changes is not None else {})}
        path.write_text(json.dumps(whole, ensure_ascii=False, indent=1, default=str), encoding="utf-8")


def write_changes(path: str | Path, changes: Changes) -> Path:
    """What changed between two reports alone (``xladdin diff -o``): an .xlsx with its Changes sheet, or
    .json; written atomically."""
    path = report_path(path)
    suffix = path.suffix.lower()
    if suffix not in (".xlsx", ".json"):
        raise InputError("output", f"{path.name}: changes are written as .xlsx or .json")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        if suffix == ".xlsx":
            from openpyxl import Workbook

            wb = Workbook()
            wb.remove(wb.active)
            _write_changes_sheet(wb, changes)
            save_workbook(wb, tmp)
        else:
            tmp.write_text(json.dumps(changes.as_dict(), ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _write_changes_sheet(wb: Any, changes: Changes) -> None:
    """The Changes sheet: a line saying what was compared, then a row per change (new 高 first)."""
    from openpyxl.styles import Font, PatternFill

    from .changes import HEADER, NEW_HIGH

    ws = wb.create_sheet("Changes")
    _append_text_safe(ws, [changes.line()])
    ws["A1"].font = Font(bold=True)
    _append_text_safe(ws, HEADER)
    for cell in ws[2]:
        cell.font = Font(bold=True)
    for change in changes.rows:
        _append_text_safe(ws, change.cells())
        if change.kind == NEW_HIGH:
            ws.cell(row=ws.max_row, column=1).fill = PatternFill("solid", start_color=RISK_FILLS["高"])
    ws.freeze_panes = "A3"
    for letter, width in (("A", 14), ("B", 10), ("C", 12), ("J", 60)):
        ws.column_dimensions[letter].width = width


def summary_counts(pool: Pool, results: Sequence[Any]) -> tuple[Counter, dict[str, Counter]]:
    by_risk: Counter = Counter()
    by_industry: dict[str, Counter] = {}
    for industry, res in zip(industries(pool), results, strict=True):
        level = "错误" if isinstance(res, XladdinError) else str(res.risk_level.value)
        by_risk[level] += 1
        by_industry.setdefault(industry_name(industry), Counter())[level] += 1
    return by_risk, by_industry


# how a report's columns read: money and ratios to 2 decimals, long text wrapped in a wide column
_TWO_DECIMALS = re.compile(r"亿元|\(%\)|（%）|%|\(元\)|元/股|PE|市盈率|ROE|EPS")
LONG_TEXT = ("理由 reason", "说明 notes", "出处 evidence", "规则依据 rule basis", "业绩亮点 highlights",
             "预测(非实际) forecasts",
             "分行业毛利率 segment gross margins", "阅读范围 read", "财报摘要 report text", "错误 error")
WIDE, NARROW, WIDEST = 48, 8, 60
MAX_LINES = 4  # of a wrapped cell shown at once (the rest by making the row taller)


def _shown_width(value: Any) -> int:
    """A value's width in a cell, a CJK character two (its longest line)."""
    text = f"{value:.2f}" if isinstance(value, float) else str(value)
    return max((sum(2 if ord(ch) > 0x2E80 else 1 for ch in line) for line in text.splitlines() or [""]), default=0)


def format_columns(ws: Any, header: list[str], rows: list[list[Any]], sample: int = 500) -> None:
    """Number formats by column (money, ratios, EPS and PE to 2 decimals), widths fitted to what the
    first ``sample`` rows hold (a header wraps over two lines), long text wrapped in a wide column."""
    from openpyxl.styles import Alignment
    from openpyxl.utils import get_column_letter

    for cell in ws[1]:
        cell.alignment = Alignment(wrap_text=True, vertical="top")
    ws.row_dimensions[1].height = 30
    wrapped: list[tuple[int, float]] = []  # (column, width) of the wrapped columns: each row's height from them
    for i, h in enumerate(header, 1):
        letter = get_column_letter(i)
        values = [r[i - 1] for r in rows[:sample] if i - 1 < len(r) and r[i - 1] not in (None, "")]
        numeric = values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        head = max(_shown_width(part) for part in str(h).split(" ", 1)) if " " in str(h) else _shown_width(h)
        fitted = max(NARROW, head + 2, *(_shown_width(v) + 2 for v in values))
        if str(h) in LONG_TEXT or any(isinstance(v, str) and len(v) > 60 for v in values):
            ws.column_dimensions[letter].width = min(fitted, WIDEST if str(h) == "财报摘要 report text" else WIDE)
            for row in ws.iter_rows(min_row=2, min_col=i, max_col=i):
                row[0].alignment = Alignment(wrap_text=True, vertical="top")
            wrapped.append((i, ws.column_dimensions[letter].width))
            continue
        if numeric and _TWO_DECIMALS.search(str(h)) and any(isinstance(v, float) for v in values):
            for row in ws.iter_rows(min_row=2, min_col=i, max_col=i):
                row[0].number_format = "0.00"
            fitted = max(NARROW, head + 2, *(len(f"{v:,.2f}") + 2 for v in values))
        ws.column_dimensions[letter].width = min(WIDE, fitted)
    top = Alignment(vertical="top")
    wrapped_at = {i for i, _ in wrapped}
    for line in ws.iter_rows(min_row=2, max_row=min(ws.max_row, sample + 1)):  # a row's cells read from its top
        for cell in line:
            if cell.column not in wrapped_at:
                cell.alignment = top
    for r, row in enumerate(rows[:sample], 2):  # a row as tall as its longest wrapped cell (hosts do not grow it)
        lines = max((-(-_shown_width(row[i - 1]) // max(1, int(width) - 1))
                     for i, width in wrapped if i - 1 < len(row) and row[i - 1] not in (None, "")), default=1)
        if lines > 1:
            ws.row_dimensions[r].height = 15 * min(lines, MAX_LINES)


NOTES = "说明 notes"


def said_once(header: list[str], rows: list[list[Any]]) -> tuple[list[list[Any]], str | None]:
    """A note every row with notes carries (``缺PE-TTM: PE规则未应用`` on a folder of reports), taken out of
    the rows to be said once on the Run sheet (``notes_every_row``); the rows and what was taken."""
    if NOTES not in header:
        return rows, None
    at = header.index(NOTES)
    noted = [[p for p in str(r[at]).split("; ") if p] for r in rows if r[at] not in (None, "")]
    if len(noted) < 2:
        return rows, None
    common = [p for p in noted[0] if all(p in parts for parts in noted[1:])]
    if not common:
        return rows, None
    out = []
    for r in rows:
        if r[at] in (None, ""):
            out.append(r)
            continue
        left = "; ".join(p for p in str(r[at]).split("; ") if p and p not in common)
        out.append([*r[:at], left or None, *r[at + 1 :]])
    return out, "; ".join(common)


def _write_xlsx(path: Path, header: list[str], rows: list[list[Any]], results: Sequence[Any], pool: Pool,
                run: dict[str, Any], changes: Changes | None = None) -> None:
    from openpyxl import Workbook
    from openpyxl.chart import BarChart, Reference
    from openpyxl.styles import Font, PatternFill

    rows, common = said_once(header, rows)
    if common:
        run = {**run, "notes_every_row": common}
    wb = Workbook()
    ws = wb.active
    ws.title = "Results"
    for row in [header, *rows]:
        _append_text_safe(ws, row)
    for cell in ws[1]:
        cell.font = Font(bold=True)
    ws.freeze_panes = ws.cell(row=2, column=min(3, len(header)))
    ws.auto_filter.ref = ws.dimensions
    if run.get("note"):  # the starter model's limits where the rows are read too: the header's note, a red tab
        from openpyxl.comments import Comment

        ws["A1"].comment = Comment(xlsx_text(str(run["note"])), "xladdin", width=420, height=120)
        ws.sheet_properties.tabColor = "C00000"
    risk_col = header.index("风险等级 risk") + 1 if "风险等级 risk" in header else None
    if risk_col:
        for r in range(2, len(rows) + 2):
            cell = ws.cell(row=r, column=risk_col)
            if cell.value in RISK_FILLS:
                cell.fill = PatternFill("solid", start_color=RISK_FILLS[cell.value])
    format_columns(ws, header, rows)

    sm = wb.create_sheet("Summary")
    note = run.get("note")
    _append_text_safe(sm, [note or f"model: {run.get('model')}"])
    sm["A1"].font = Font(bold=True, color="C00000" if note else "000000")
    if risk_col is None:  # not a screen (highlights): the run's facts are on the Run sheet
        _write_run(wb, run)
        save_workbook(wb, path)
        return
    sm.append([])
    sm.append(["风险等级 risk", "数量 count"])
    by_risk, by_industry = summary_counts(pool, results)
    levels = [lv for lv in ("高", "中", "低", "未评", "错误") if by_risk[lv] or lv not in ("未评", "错误")]
    for level in levels:
        sm.append([level, by_risk[level]])
    chart = BarChart()
    chart.title = "风险分布 risk levels"
    chart.add_data(Reference(sm, min_col=2, min_row=3, max_row=3 + len(levels)), titles_from_data=True)
    chart.set_categories(Reference(sm, min_col=1, min_row=4, max_row=3 + len(levels)))
    chart.height = 6  # cm: about 12 rows
    sm.add_chart(chart, sm.cell(row=3, column=len(levels) + 4).coordinate)  # right of the industry counts' 合计
    sm.append([])
    start = sm.max_row + 1
    sm.append(["行业 industry", *levels, "合计 total"])
    for industry, counts in sorted(by_industry.items(), key=lambda kv: -sum(kv[1].values())):
        _append_text_safe(sm, [industry, *[counts[lv] for lv in levels], sum(counts.values())])
    for cell in (*sm[3], *sm[start]):
        cell.font = Font(bold=True)
    if sm.max_row < 3 + CHART_ROWS:  # the comparison starts below the risk chart, never under it
        sm.cell(row=3 + CHART_ROWS, column=1, value="")
    _write_comparison(sm, pool, results)
    sm.column_dimensions["A"].width = 24

    if changes is not None:
        _write_changes_sheet(wb, changes)
    _write_run(wb, run)
    save_workbook(wb, path)


def _write_run(wb: Any, run: dict[str, Any]) -> None:
    rs = wb.create_sheet("Run")
    for key, value in run.items():
        shown = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value
        _append_text_safe(rs, [key, shown])
    rs.column_dimensions["A"].width = 18
    rs.column_dimensions["B"].width = 100


def industries(pool: Pool) -> list[Any]:
    """Each row's industry cell (``None`` without an industry column)."""
    idx = pool.mapping.get("industry")
    return [raw[idx] if idx is not None and idx < len(raw) else None for raw in pool.rows]


def _write_comparison(sm: Any, pool: Pool, results: Sequence[Any]) -> None:
    """The industries compared (``compare.from_results``, a column per period) below the counts, and a
    chart beside."""
    write_by_period(sm, from_results(industries(pool), results))


def write_by_period(ws: Any, table: list[list[Any]]) -> None:
    """``table`` (``compare.figure_table``) as its medians with a column per period and the change, and a
    chart of one figure's median by industry, a bar per period: the years side by side per industry."""
    from openpyxl.chart import BarChart, Reference, Series
    from openpyxl.styles import Font
    from openpyxl.utils import get_column_letter

    if not table:
        return
    header, rows = by_period(table)
    if ws.max_row > 1:
        ws.append([])
    _append_text_safe(ws, ["行业对比 industries compared (figures read and checked: the median of each period; "
                           "变化 = the last period's less the one before, a ratio's in percentage points; blank "
                           "across a gap in the years or where companies entered or left: 数量 on the Figures sheet)"])
    ws.cell(row=ws.max_row, column=1).font = Font(bold=True)
    _append_text_safe(ws, header)
    head = ws.max_row
    for cell in ws[head]:
        cell.font = Font(bold=True)
    for row in rows:
        _append_text_safe(ws, row)
        for cell in ws[ws.max_row][2:]:
            cell.number_format = "0.00"
    ws.column_dimensions["A"].width = max(ws.column_dimensions["A"].width or 0, 16)
    ws.column_dimensions["B"].width = 26
    for j in range(3, len(header) + 1):
        ws.column_dimensions[get_column_letter(j)].width = 13
    charted = chart_figure(table)
    lines = [r for r in rows if r[1] == charted]
    if not lines:
        return
    # the charted figure's medians by industry, a column per period, beside the table (a chart reads a
    # contiguous range)
    col = len(header) + 2
    ws.cell(row=head - 1, column=col, value=f"{charted} 中位数 median").font = Font(bold=True)
    for j, title in enumerate(("行业 industry", *header[2:-1])):
        ws.cell(row=head, column=col + j, value=xlsx_text(title)).font = Font(bold=True)
    for i, r in enumerate(lines, 1):
        ws.cell(row=head + i, column=col, value=xlsx_text(r[0]))
        for j, v in enumerate(r[2:-1], 1):
            ws.cell(row=head + i, column=col + j, value=v).number_format = "0.00"
    ws.column_dimensions[get_column_letter(col)].width = 16
    last = head + len(lines)
    chart = BarChart()
    chart.title = f"{charted}: 行业中位数 median by industry, 按期间 by period"
    chart.width, chart.height = 22, 10  # cm: room for an industry per group of bars
    for j in range(1, len(header) - 2):  # a series per period: its median of each industry
        chart.series.append(Series(Reference(ws, min_col=col + j, min_row=head + 1, max_row=last),
                                   title=str(header[j + 1])))
    chart.set_categories(Reference(ws, min_col=col, min_row=head + 1, max_row=last))
    ws.add_chart(chart, ws.cell(row=last + 2, column=col).coordinate)


def _append_text_safe(ws: Any, row: list[Any]) -> None:
    """Append ``row``, each text as an .xlsx cell can hold it (``save_workbook`` keeps it text)."""
    ws.append([xlsx_text(v) for v in row])


def save_workbook(wb: Any, path: str | Path) -> None:
    """Save ``wb`` with no formula in it: openpyxl stores any text starting with ``=`` as a formula, so
    every such cell of every sheet (an industry, a name, a quote from a report: whatever a pool or a
    report holds) is made text here, the one place every workbook the product writes is saved."""
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if cell.data_type == "f":
                    cell.data_type = "s"
    wb.save(path)
