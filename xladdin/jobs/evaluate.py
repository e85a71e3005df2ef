"""``xladdin eval GOLD``: how well the screen reads, measured as a product feature.

A gold file is a pool (CSV or XLSX, the same columns ``xladdin screen`` reads) with gold
columns beside it: ``gold_revenue``, ``gold_net_profit`` (亿元), ``gold_net_profit_growth``,
``gold_roe`` (%), ``gold_eps`` (元), ``gold_risk`` (高/中/低). Every row is screened through the
same path as ``xladdin screen`` (cache included); then, per gold column, the share of rows whose
figure is within tolerance, the evidence rate (figures shown with a verified quote) and the rows
that missed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import Batcher, started
from ..errors import InputError, XladdinError
from ..reading.documents import Reports
from ..reading.figures import FIGURES
from ..reading.pool import Pool, parse_number, read_pool
from ..reading.tables import parse_shown, printed_number
from ..settings import Settings
from ..tasks.rules import Flag
from ..tasks.screen import RESULT_FIGURES, ScreenTask
from .pool_screen import screen_records

# gold column → the result's figure column (its label in the evidence column comes from FIGURES)
GOLD_FIGURES = {
    "gold_revenue": "revenue",
    "gold_net_profit": "net_profit",
    "gold_net_profit_growth": "net_profit_growth",
    "gold_roe": "roe_text",
    "gold_eps": "eps_text",
}
RELATIVE_TOLERANCE = 0.01  # a figure within 1% of the gold value is right (a ratio or EPS: or 0.01 absolute)


@dataclass
class FieldScore:
    rows: int = 0
    correct: int = 0
    quoted: int | None = 0  # None: a field without quotes (the risk level is computed, not read)
    traced: int = 0  # right and shown with its verified quote
    misses: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        def rate(n: int | None) -> float | None:
            return round(n / self.rows, 3) if self.rows and n is not None else None

        return {"rows": self.rows, "correct": self.correct, "accuracy": rate(self.correct),
                "evidence_rate": rate(self.quoted), "correct_and_quoted": rate(self.traced) if self.quoted is not None
                else None, "misses": (self.misses or [])[:20]}


def close_enough(read: float | None, gold: float, money: bool = False) -> bool:
    """Within 1% of ``gold``; a percentage or EPS also within 0.01 (its printed precision), but not
    money: 0.01 亿元 is 100万元, more than a small company's whole profit."""
    if read is None:
        return False
    return abs(read - gold) <= max(0.0 if money else 0.01, RELATIVE_TOLERANCE * abs(gold))


def gold_columns(pool: Pool) -> dict[str, int]:
    cols = {c.strip().lower(): i for i, c in enumerate(pool.columns)}
    found = {name: cols[name] for name in (*GOLD_FIGURES, "gold_risk") if name in cols}
    if not found:
        raise InputError("columns", f"{pool.path.name} has no gold column (expected one of "
                         f"{', '.join((*GOLD_FIGURES, 'gold_risk'))})")
    return found


def evaluate(gold_path: str | Path, settings: Settings, *, progress: bool = True,
             batcher: Batcher | None = None) -> dict[str, Any]:
    pool = read_pool(gold_path)
    gold = gold_columns(pool)
    task = ScreenTask(max_text_chars=settings.max_text_chars)
    with started(settings, batcher) as core:
        allowed = Reports.of(settings, pool.path.parent)  # report files: from the gold file's folder
        records = [allowed.place(r, pool.path.parent) for r in pool.records()]
        results, _, _ = screen_records(core, task, records, progress)
        model, engine = core.learned.model_id, core.engine.describe()
    scores = {name: FieldScore(misses=[], quoted=None if name == "gold_risk" else 0) for name in gold}
    errors, alone = [], 0
    for i, (raw, res) in enumerate(zip(pool.rows, results, strict=True)):
        code = raw[pool.mapping["code"]] if pool.mapping["code"] < len(raw) else None
        if isinstance(res, XladdinError):
            errors.append({"row": i + 2, "code": code, "error": str(res)})
            continue
        alone += Flag.NO_ANSWER in res.flags
        for name, idx in gold.items():
            given = raw[idx] if idx < len(raw) else None
            if name == "gold_risk":
                if given in (None, ""):
                    continue
                s = scores[name]
                s.rows += 1
                if res.risk_level.value == str(given).strip():
                    s.correct += 1
                else:
                    s.misses.append({"row": i + 2, "code": code, "gold": given, "read": res.risk_level.value})
                continue
            value = parse_number(given, name)
            if value is None:
                continue
            attr = GOLD_FIGURES[name]
            label, unit = FIGURES[RESULT_FIGURES[attr]]
            read = getattr(res, attr)
            s = scores[name]
            s.rows += 1
            quoted = f"{label}「" in res.evidence
            s.quoted = (s.quoted or 0) + quoted
            if close_enough(read, value, money=unit == "亿元"):
                s.correct += 1
                s.traced += quoted
            else:
                s.misses.append({"row": i + 2, "code": code, "gold": value, "read": read, "notes": res.notes[:200]})
    return {"gold": str(gold_path), "rows": len(pool.rows), "errors": len(errors), "error_rows": errors[:20],
            "without_answer": alone,
            "model": model, "engine": engine, "task_version": task.version,
            "fields": {name: s.as_dict() for name, s in scores.items()}}


def table(report: dict[str, Any]) -> str:
    alone = f", {report['without_answer']} without a model answer (模型未作答)" if report.get("without_answer") else ""
    lines = [f"{report['rows']} rows, {report['errors']} errors{alone} — {report['model']}",
             f"{'field':<24} {'rows':>5} {'accuracy':>9} {'evidence':>9} {'right+quoted':>13}"]
    for name, f in report["fields"].items():
        acc, ev, traced = ("" if f[k] is None else f"{f[k]:.1%}" for k in ("accuracy", "evidence_rate",
                                                                            "correct_and_quoted"))
        lines.append(f"{name:<24} {f['rows']:>5} {acc:>9} {ev:>9} {traced:>13}")
    return "\n".join(lines)


def write(report: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


# ---------------------------------------------------------------- a gold file of report files
# ``gold.jsonl``: one report file a line, with the figures a person read from it (money in the
# report's own 元, ratios in percent) — field → (the result's column, money)
REPORT_FIELDS: dict[str, tuple[str, bool]] = {
    "revenue": ("revenue", True),
    "net_profit": ("net_profit", True),
    "net_profit_prev": ("net_profit_prev_text", True),
    "net_profit_ex": ("net_profit_deducted", True),
    "ocf": ("operating_cash_flow", True),
    "net_profit_change_pct": ("net_profit_growth", False),
    "eps": ("eps_text", False),
    "roe": ("roe_text", False),
    "gross_margin": ("gross_margin", False),
    "gross_margin_prev": ("gross_margin_prev", False),
}
# ``segment``: the first 分行业 row of the 主营业务 table, ``{"name", "gross_margin_printed", "change_printed",
# "page"}`` (``null``: the report has none, a bank's): right when the result's 分行业毛利率 column shows that
# segment with the printed margin, change and page
SEGMENT = "segment"
KEY_FIGURES = tuple(REPORT_FIELDS)[:8]  # the key-figure table's eight; the last two come from the statements
YUAN_TO_YI = 1e-8
MONEY_TOLERANCE = 1e-6  # relative: a money figure is the printed one (its unit aside), not a close one
RATIO_TOLERANCE = 0.006  # percent or 元/股, printed with two decimals (a gross margin computed, then rounded)


def read_report_gold(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a report gold file, each checked: a JSON object naming its ``file``, with ``code``
    and ``name``; a bad line is an ``InputError`` naming the file, the line and the field."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InputError("gold", f"{path}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise InputError("gold", f"{path}: not UTF-8 text") from None
    out = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError("gold", f"{path.name} line {n}: not JSON ({e.msg})") from None
        if not isinstance(item, dict):
            raise InputError("gold", f"{path.name} line {n}: expected a JSON object")
        for key in ("file", "code", "name"):
            if not isinstance(item.get(key), str | int) or not str(item[key]).strip():
                raise InputError(key, f"{path.name} line {n}: '{key}' is missing")
        for key in REPORT_FIELDS:
            value = item.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise InputError(key, f"{path.name} line {n}: '{key}' is {value!r}, expected a number or null")
        segment = item.get(SEGMENT)
        if segment is not None and (not isinstance(segment, dict) or not isinstance(segment.get("name"), str)
                                    or printed_number(str(segment.get("gross_margin_printed", ""))) is None):
            raise InputError(SEGMENT, f"{path.name} line {n}: '{SEGMENT}' is {segment!r}, expected null or an object "
                             "with 'name' and 'gross_margin_printed' (and 'change_printed', 'page')")
        out.append(item)
    if not out:
        raise InputError("gold", f"{path.name}: no report lines")
    return out


def report_verdict(read: float | None, gold: float | None, money: bool) -> str:
    """``right``, ``wrong``, ``missing``, or ``none`` (no gold value and nothing read). A figure read
    where the report gives none (a bank's gross margin) is wrong."""
    if gold is None:
        return "none" if read is None else "wrong"
    if read is None:
        return "missing"
    if money:
        gold = gold * YUAN_TO_YI
        return "right" if abs(read - gold) <= MONEY_TOLERANCE * max(abs(gold), 1e-12) else "wrong"
    return "right" if abs(read - gold) <= RATIO_TOLERANCE else "wrong"


def segment_verdict(column: str | None, gold: dict[str, Any] | None) -> tuple[str, str | None]:
    """``right``, ``wrong``, ``missing`` or ``none`` for a report's gold segment against the result's
    分行业毛利率 column, and what was read for it. Shown with another margin, change or page is wrong; a
    segment read where the report has none (a bank) is wrong."""
    shown = parse_shown(column)
    if gold is None:
        return ("none", None) if not shown else ("wrong", column)
    name = "".join(gold["name"].split())
    found = sorted((s for s in shown if "".join(str(s["name"]).split()) == name), key=lambda s: s["kind"] != "分行业")
    if not found:
        return "missing", None
    s = found[0]
    read = f"{s['name']} {s['margin']:g}% change {s['change']} page {s['page']}"
    margin = printed_number(gold["gross_margin_printed"])
    change = printed_number(str(gold["change_printed"])) if gold.get("change_printed") is not None else None
    ok = (margin is not None and abs(s["margin"] - margin) < 0.0051
          and (change is None or (s["change"] is not None and abs(s["change"] - change) < 0.0051))
          and (gold.get("page") is None or s["page"] == gold["page"]))
    return ("right" if ok else "wrong"), read


def evaluate_reports(gold_path: str | Path, settings: Settings, *, reports: str | Path | None = None,
                     progress: bool = True, batcher: Batcher | None = None) -> dict[str, Any]:
    """Every report of a gold file screened as ``xladdin screen`` screens a pool naming them (files
    read only from the gold file's folder, ``reports`` and the ``report_dirs`` setting), and per field:
    right, wrong, missing."""
    gold_path = Path(gold_path)
    items = read_report_gold(gold_path)
    folder = Path(reports) if reports is not None else gold_path.parent
    records = [{"code": str(g["code"]), "name": g["name"], "industry": g.get("industry"), "report_file": g["file"]}
               for g in items]
    task = ScreenTask(max_text_chars=settings.max_text_chars)
    with started(settings, batcher) as core:
        allowed = Reports.of(settings, gold_path.parent, reports)
        results, _, _ = screen_records(core, task, [allowed.place(r, folder) for r in records], progress)
        model, engine = core.learned.model_id, core.engine.describe()
    scored = (*REPORT_FIELDS, *((SEGMENT,) if any(SEGMENT in g for g in items) else ()))
    fields = {name: {"right": 0, "wrong": 0, "missing": 0} for name in scored}
    rows, errors = [], []
    for g, res in zip(items, results, strict=True):
        if isinstance(res, XladdinError):
            errors.append({"file": g["file"], "error": str(res)})
            for name in scored:
                if g.get(name) is not None:
                    fields[name]["missing"] += 1
            continue
        row: dict[str, Any] = {"file": g["file"]}
        for name, (attr, money) in REPORT_FIELDS.items():
            read = getattr(res, attr, None)
            verdict = report_verdict(read, g.get(name), money)
            if verdict != "none":
                fields[name][verdict] += 1
            row[name] = {"verdict": verdict, "gold": g.get(name), "read": read}
        if SEGMENT in g:
            verdict, read = segment_verdict(res.segments, g[SEGMENT])
            if verdict != "none":
                fields[SEGMENT][verdict] += 1
            row[SEGMENT] = {"verdict": verdict, "gold": g[SEGMENT], "read": read}
        row["notes"] = res.notes
        rows.append(row)
    return {"gold": str(gold_path), "reports": len(items), "errors": len(errors), "error_rows": errors,
            "model": model, "engine": engine, "task_version": task.version, "fields": fields, "rows": rows}


def report_table(report: dict[str, Any]) -> str:
    """Per field: right / wrong / missing, and the totals of the eight key figures and of all."""
    lines = [f"{report['reports']} reports, {report['errors']} errors — {report['model']}",
             f"{'field':<24} {'right':>6} {'wrong':>6} {'missing':>8}"]
    for name, f in report["fields"].items():
        lines.append(f"{name:<24} {f['right']:>6} {f['wrong']:>6} {f['missing']:>8}")
    for label, names in (("key figures (8)", KEY_FIGURES), ("all", tuple(report["fields"]))):
        total = {k: sum(report["fields"][n][k] for n in names) for k in ("right", "wrong", "missing")}
        scored = sum(total.values())
        share = f"  ({total['right'] / scored:.1%} right)" if scored else ""
        lines.append(f"{label:<24} {total['right']:>6} {total['wrong']:>6} {total['missing']:>8}{share}")
    for row in report["rows"]:
        off = [f"{n} {v['verdict']} (gold {v['gold']}, read {v['read']})" for n, v in row.items()
               if isinstance(v, dict) and v["verdict"] in ("wrong", "missing")]
        if off:
            lines.append(f"  {row['file']}: " + "; ".join(off))
    return "\n".join(lines)
