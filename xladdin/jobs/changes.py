"""What changed between two screen reports (last night's and tonight's): the rows whose risk level,
score or flags changed, the rows that appeared and those that left, new 高 rows first.

A report is read back as the product writes it (``report.py``): an ``.xlsx`` (its Results and Run
sheets), a ``.csv`` (and the ``.run.json`` beside it; a text made safe with a leading apostrophe is
read as it was) or a ``.json``. Rows are matched by their stock code's six digits (a verdict's
``600001.SH`` and an error row's ``600001`` are one stock: a row failing tonight is one change, to 错误), a
code more than once in either report by its name too and then by its order among those (the codes named
in the changes), never by position, so a pool sorted another way compares as the same rows.
"""

from __future__ import annotations

import collections
import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..reading.documents import decode_text
from ..reading.pool import header_field, match_header

CODE = "代码 code"
NAME = "名称 name"
LEVEL = "风险等级 risk"
SCORE = "评分 score"
FLAGS = "标记 flags"
ERROR = "错误 error"
ERROR_LEVEL = "错误"  # an error row's level, as the Summary counts it

NEW_HIGH = "新高 new 高"
CHANGED = "变化 changed"
APPEARED = "新增 appeared"
LEFT = "移出 left"
KINDS = (NEW_HIGH, CHANGED, APPEARED, LEFT)  # the order of the Changes sheet
HEADER = ["变化 change", "代码 code", "名称 name", "风险 before", "风险 now", "评分 before", "评分 now",
          "标记 before", "标记 now", "说明 what changed"]


@dataclass
class Saved:
    """A report as read back: its columns, rows (each a dict by column) and the run's facts."""

    path: Path
    columns: list[str]
    rows: list[dict[str, Any]]
    run: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Change:
    kind: str
    code: str
    name: str | None
    level: tuple[str | None, str | None]
    score: tuple[float | None, float | None]
    flags: tuple[tuple[str, ...], tuple[str, ...]]
    what: str

    def cells(self) -> list[Any]:
        return [self.kind, self.code, self.name, *self.level, *self.score, ",".join(self.flags[0]),
                ",".join(self.flags[1]), self.what]

    def as_dict(self) -> dict[str, Any]:
        return {"change": self.kind, "code": self.code, "name": self.name,
                "level": {"before": self.level[0], "now": self.level[1]},
                "score": {"before": self.score[0], "now": self.score[1]},
                "flags": {"before": list(self.flags[0]), "now": list(self.flags[1])}, "what": self.what}


@dataclass
class Changes:
    old: str
    new: str
    rows: list[Change]
    compared: int  # rows in both reports
    twice: list[str] = field(default_factory=list)  # codes more than once in a report (matched by name and order)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def counts(self) -> dict[str, int]:
        return {kind: sum(c.kind == kind for c in self.rows) for kind in KINDS}

    def line(self) -> str:
        counts = self.counts()
        twice = (f"; codes more than once, matched by name and order: {', '.join(self.twice[:10])}"
                 if self.twice else "")
        if not self.rows:
            return f"no changes: {self.compared} rows compared ({self.old} → {self.new}){twice}"
        parts = ", ".join(f"{n} {kind.split()[0]}" for kind, n in counts.items() if n)
        return (f"{len(self.rows)} rows changed of {self.compared} compared: {parts} ({self.old} → {self.new})"
                f"{twice}")

    def as_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "compared": self.compared, "changed": len(self.rows),
                "counts": self.counts(), "rows": [c.as_dict() for c in self.rows], "codes_twice": self.twice}


def read_saved(path: str | Path) -> Saved:
    """A report the product wrote (.xlsx, .csv with its .run.json, .json), read back; an
    ``InputError`` naming the file when it is none."""
    path = Path(path)
    if not path.is_file():
        raise InputError("report", f"{path}: file not found")
    suffix = path.suffix.lower()
    try:
        if suffix == ".xlsx":
            return _read_xlsx(path)
        if suffix == ".csv":
            return _read_csv(path)
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = data.get("rows") if isinstance(data, dict) else None
            if not isinstance(rows, list):
                raise InputError("report", f"{path.name}: not a report (no rows)")
            columns = list(dict.fromkeys(k for r in rows for k in r))
            run = data.get("run")
            return Saved(path, columns, rows, run if isinstance(run, dict) else {})
    except InputError:
        raise
    except Exception as e:  # damaged: empty, cut short, not a zip (BadZipFile), a workbook of another shape
        raise InputError("report", f"{path.name}: cannot be read as a report ({e.__class__.__name__}: {e})") from None
    raise InputError("report", f"{path.name}: expected a report .xlsx, .csv or .json")


def _read_xlsx(path: Path) -> Saved:
    from openpyxl import load_workbook

    wb = load_workbook(path, read_only=True, data_only=True)
    try:
        if "Results" not in wb.sheetnames:
            raise InputError("report", f"{path.name}: no Results sheet (not a report this product wrote)")
        table = [list(r) for r in wb["Results"].iter_rows(values_only=True)]
        run: dict[str, Any] = {}
        if "Run" in wb.sheetnames:
            for key, value, *_ in wb["Run"].iter_rows(values_only=True):
                if key is not None:
                    run[str(key)] = _json_value(value)
    finally:
        wb.close()
    columns = [str(h) if h is not None else "" for h in (table[0] if table else [])]
    rows = [dict(zip(columns, r, strict=False)) for r in table[1:] if any(v is not None for v in r)]
    return Saved(path, columns, rows, run)


def _json_value(value: Any) -> Any:
    """A Run sheet value: a dict or list was written as its JSON text."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _read_csv(path: Path) -> Saved:
    text = decode_text(path.read_bytes(), path.name, "report")
    table = list(csv.reader(text.splitlines()))
    columns = [_plain(h) for h in (table[0] if table else [])]
    rows = [dict(zip(columns, [_plain(v) if v != "" else None for v in r], strict=False)) for r in table[1:]]
    beside = path.with_suffix(".run.json")
    run = json.loads(beside.read_text(encoding="utf-8")) if beside.is_file() else {}
    return Saved(path, columns, rows, run)


def _plain(value: str) -> str:
    """A CSV cell as it was before ``report.neutralize`` made it safe."""
    return value[1:] if value.startswith("'") and value[1:2] in ("=", "+", "-", "@", "\t", "\r") else value


def code_column(saved: Saved) -> str:
    """The column that names each row's stock: the verdict's code, else the pool's own code column."""
    if CODE in saved.columns:
        return CODE
    for column in saved.columns:
        if header_field(column) == "code":
            return column
    raise InputError("report", f"{saved.path.name}: no code column (not a screen report)")


def _codes(saved: Saved) -> list[tuple[str, str, dict[str, Any]]]:
    """Each row's (key code, code as shown, row): the code from the verdict, else from the pool's own column (an
    error row has no verdict); keyed by its six digits, so ``600001.SH`` (a verdict) and ``600001`` (the pool's
    own cell of an error row) are one stock."""
    own = next((c for c in saved.columns if c != CODE and (match_header(c) or ("",))[0] == "code"), None) \
        if CODE in saved.columns else None
    column = code_column(saved)
    out = []
    for row in saved.rows:
        shown = _code(row.get(column) if row.get(column) not in (None, "") else row.get(own) if own else None)
        digits = re.search(r"(?<!\d)\d{6}(?!\d)", shown)
        out.append((digits.group(0) if digits else shown, shown, row))
    return out


def _keyed(saved: Saved, twice: set[str]) -> dict[tuple[str, str, int], tuple[str, dict[str, Any]]]:
    """Rows by (code, name, occurrence): a code once in both reports by its code alone; a code ``twice`` (in
    either report) by its name too, then by its order among rows of that code and name, so a pool sorted
    another way compares as the same rows."""
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for code, shown, row in _codes(saved):
        name = (_name(row, saved) or "") if code in twice else ""
        seen[(code, name)] = seen.get((code, name), 0) + 1
        out[(code, name, seen[(code, name)])] = (shown, row)
    return out


def _code(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = "" if value is None else str(value).strip()
    return text.zfill(6) if text.isdigit() and len(text) < 6 else text


def _level(row: dict[str, Any]) -> str | None:
    if row.get(ERROR) not in (None, ""):
        return ERROR_LEVEL
    level = row.get(LEVEL)
    return None if level in (None, "") else str(level)


def _score(row: dict[str, Any]) -> float | int | None:
    value = row.get(SCORE)
    try:
        number = None if value in (None, "") else float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number is not None and number.is_integer() else number


def _flags(row: dict[str, Any]) -> tuple[str, ...]:
    value = row.get(FLAGS)
    return tuple(sorted(f.strip() for f in str(value).split(",") if f.strip())) if value not in (None, "") else ()


def _name(row: dict[str, Any], saved: Saved) -> str | None:
    if row.get(NAME) not in (None, ""):
        return str(row[NAME])
    own = next((c for c in saved.columns if c != NAME and (match_header(c) or ("",))[0] == "name"), None)
    return None if own is None or row.get(own) in (None, "") else str(row[own])


def _shown(score: float | None) -> str:
    return "—" if score is None else f"{score:g}"


PERIOD, READ, BASIS = "报告期 period", "阅读范围 read", "规则依据 rule basis"
# the figures a verdict is made from, as the report shows them: the pool's own column or the report's reading
CAUSE_FIELDS = (("roe", "ROE", "文本ROE(%) ROE in text"), ("pe_ttm", "PE-TTM", None),
                ("net_profit", "净利润", "净利润(亿元) net profit"))


def _causes(was: dict[str, Any], now: dict[str, Any], old: Saved, new: Saved) -> list[str]:
    """Why a row's verdict changed, as far as the two reports show it: a newer report read (its period, its
    file), a figure the rules take that moved, the rules themselves, and the basis the rules give now."""
    out = []
    if was.get(PERIOD) != now.get(PERIOD) and (was.get(PERIOD) or now.get(PERIOD)):
        out.append(f"报告 {was.get(PERIOD) or '—'} → {now.get(PERIOD) or '—'}")
    files = [str(r.get(READ) or "").split(":")[0] for r in (was, now)]
    if files[0] != files[1] and all(files):
        out.append(f"所读文件 {files[0]} → {files[1]}")
    for name, label, shown in CAUSE_FIELDS:
        before, after = _field(was, old, name, shown), _field(now, new, name, shown)
        if before != after:
            out.append(f"{label} {_shown(before)} → {_shown(after)}")
    rules = [s.run.get("rules") if isinstance(s.run, dict) else None for s in (old, new)]
    if rules[0] and rules[1] and rules[0] != rules[1]:
        moved = [f"{k} {rules[0].get(k)} → {rules[1].get(k)}" for k in dict.fromkeys([*rules[0], *rules[1]])
                 if rules[0].get(k) != rules[1].get(k)]
        out.append("规则变更: " + ", ".join(moved))
    if now.get(BASIS) not in (None, "") and was.get(BASIS) != now.get(BASIS):
        out.append(f"依据: {now[BASIS]}")
    return out


def _field(row: dict[str, Any], saved: Saved, name: str, shown: str | None) -> float | None:
    """A row's figure the rules take: the pool's own column for field ``name``, else the report's (``shown``)."""
    own = next((c for c in saved.columns if header_field(c) == name), None)
    for column in (own, shown):
        value = row.get(column) if column else None
        try:
            if value not in (None, ""):
                return round(float(value), 4)
        except (TypeError, ValueError):
            continue
    return None


def matched(old: Saved, new: Saved) -> tuple[dict, dict, set[str]]:
    """Both reports' rows keyed alike (``_keyed``: (code, name, occurrence) → (code as shown, row)), and the
    codes more than once in either."""
    twice: set[str] = set()
    for saved in (old, new):
        counted = collections.Counter(code for code, _, _ in _codes(saved))
        twice |= {code for code, n in counted.items() if n > 1}
    return _keyed(old, twice), _keyed(new, twice), twice


def compare_reports(old: Saved, new: Saved) -> Changes:
    """The rows of ``new`` whose level, score or flags differ from ``old``'s, those only in ``new``
    (appeared) and those only in ``old`` (left): rows now 高 that were not first, then the other
    changes, then appeared, then left; each group in its report's order."""
    before, now, twice = matched(old, new)
    found: list[Change] = []
    for key, (shown, row) in now.items():
        level, score, flags = _level(row), _score(row), _flags(row)
        name = _name(row, new)
        if key not in before:
            kind = NEW_HIGH if level == "高" else APPEARED
            found.append(Change(kind, shown, name, (None, level), (None, score), ((), flags), "新出现的行"))
            continue
        was_shown, was = before[key]
        shown = max(shown, was_shown, key=len)  # the verdict's code (600001.SH), an error row's pool cell (600001)
        w_level, w_score, w_flags = _level(was), _score(was), _flags(was)
        what = []
        if level != w_level:
            what.append(f"风险 {w_level or '—'} → {level or '—'}")
        if score != w_score:
            what.append(f"评分 {_shown(w_score)} → {_shown(score)}")
        if flags != w_flags:
            added = [f for f in flags if f not in w_flags]
            gone = [f for f in w_flags if f not in flags]
            what.append("标记 " + ", ".join([*(f"+{f}" for f in added), *(f"-{f}" for f in gone)]))
        if what:
            what.extend(_causes(was, row, old, new))
            kind = NEW_HIGH if level == "高" and w_level != "高" else CHANGED
            found.append(Change(kind, shown, name, (w_level, level), (w_score, score), (w_flags, flags),
                                "; ".join(what)))
    for key, (shown, was) in before.items():
        if key not in now:
            found.append(Change(LEFT, shown, _name(was, old), (_level(was), None), (_score(was), None),
                                (_flags(was), ()), "已不在新的报告中"))
    found.sort(key=lambda c: KINDS.index(c.kind))  # stable: each group keeps its report's order
    return Changes(str(old.path), str(new.path), found, len(before.keys() & now.keys()), sorted(twice))


def read_screen(path: str | Path) -> Saved:
    """A screen report read back (``read_saved``), or an ``InputError`` naming the file when it is
    another kind (a highlights report has no risk level to compare)."""
    saved = read_saved(path)
    task = saved.run.get("task") if isinstance(saved.run, dict) else None
    if (task is not None and task != "screen") or LEVEL not in saved.columns:
        kind = f"a {task} report" if isinstance(task, str) and task != "screen" else f"no {LEVEL} column"
        raise InputError("report", f"{saved.path.name}: not a screen report ({kind}): compare screen reports")
    return saved


def compare_files(old: str | Path, new: str | Path) -> Changes:
    return compare_reports(read_screen(old), read_screen(new))



def saved_from_table(path: str | Path, header: list[str], rows: list[list[Any]],
                     run: dict[str, Any] | None = None) -> Saved:
    """A report not written yet (``report.table``'s header and rows) as if read back."""
    return Saved(Path(path), list(header), [dict(zip(header, r, strict=False)) for r in rows], run or {})
