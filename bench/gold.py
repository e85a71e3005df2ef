"""``python -m bench gold OUT.csv``: the dev gold set for ``xladdin eval``, built at run time from
``../shared/data`` (never committed).

Rows are results statements in the wordings Chinese announcements and news use — 亿元, 万元 and
元 with thousands separators, 归属于上市公司股东的净利润, 归母净利润, 亏损 — filled with real
published figures: tushare's FY2015 profitability table (revenue and net profit in 百万元, ROE,
EPS) and FinGLM's figures read from FY2019-2021 annual reports (元). The sentences are written
here; the figures, and so the gold values, are the sources' own.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from .common import SHARED_DATA
from .gpu import load_basics

DATA = SHARED_DATA
HEADER = ["代码", "名称", "行业", "市盈率TTM", "ROE", "每股收益", "财报摘要",
          "gold_revenue", "gold_net_profit", "gold_roe", "gold_eps"]


def _tushare_rows(limit: int) -> list[list[object]]:
    basics = load_basics() or {}
    candidates = []
    seen = set()
    with (DATA / "wengowl_stock_tushare2016" / "profit2015_4.csv").open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            code = r["code"].zfill(6)
            if code not in seen and r["business_income"] and r["net_profits"] and r["eps"]:
                seen.add(code)
                candidates.append(r)
    losses = [r for r in candidates if float(r["net_profits"]) < 0]
    profits = [r for r in candidates if float(r["net_profits"]) >= 0]
    n_loss = min(len(losses), limit // 4)
    step = max(1, len(profits) // (limit - n_loss))  # spread over the table (it is sorted by ROE)
    chosen = losses[:: max(1, len(losses) // max(1, n_loss))][:n_loss] + profits[::step][: limit - n_loss]
    out: list[list[object]] = []
    for k, r in enumerate(chosen):
        code, name, roe, eps = r["code"].zfill(6), r["name"], r["roe"], r["eps"]
        rev, np_ = float(r["business_income"]) / 100, float(r["net_profits"]) / 100  # 百万元 → 亿元
        if np_ < 0:
            text = (f"{name}发布2015年年报，公司全年实现营业收入{rev:.4f}亿元，"
                    f"亏损{abs(np_) * 10000:.2f}万元，基本每股收益{eps}元。")
        elif k % 3 == 0:
            text = (f"{name}({code})公布2015年年报：营业收入{rev:.4f}亿元，归属于上市公司股东的净利润"
                    f"{np_:.4f}亿元，基本每股收益{eps}元，加权平均净资产收益率{roe}%。")
        elif k % 3 == 1:
            text = (f"2015年度，{name}营收{rev * 10000:.2f}万元；归母净利润{np_ * 10000:.2f}万元；"
                    f"毛利率{r['gross_profit_rate']}%，每股收益{eps}元。")
        else:
            text = (f"{name}年报显示，报告期内营业收入{rev * 1e8:,.2f}元，净利润{np_ * 1e8:,.2f}元，"
                    f"净资产收益率{roe}%。")
        b = basics.get(code, {})
        # gold only for what the text states: a figure it does not give cannot be read
        gold_roe = roe if "收益率" in text else ""
        gold_eps = eps if "每股收益" in text else ""
        out.append([code, name, b.get("industry", ""), b.get("pe", ""), roe, eps, text,
                    round(rev, 6), round(np_, 6), gold_roe, gold_eps])
    return out


def _finglm_rows(limit: int) -> list[list[object]]:
    by_company: dict[tuple[str, str], dict[str, str]] = {}
    meta: dict[tuple[str, str], dict[str, str]] = {}
    with (DATA / "finglm_numeric_ground_truth.jsonl").open(encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            if r["field"] in ("营业收入", "净利润") and r["value"].endswith("元"):
                key = (r["company_short"], r["year"])
                by_company.setdefault(key, {})[r["field"]] = r["value"].removesuffix("元")
                meta[key] = r
    out: list[list[object]] = []
    for key, figs in by_company.items():
        r = meta[key]
        parts, gold_rev, gold_np = [], "", ""
        if "营业收入" in figs:
            v = float(figs["营业收入"])
            parts.append(f"营业收入{v:,.2f}元")
            gold_rev = round(v / 1e8, 6)
        if "净利润" in figs:
            v = float(figs["净利润"])
            parts.append(f"归属于上市公司股东的净利润{v:,.2f}元" if v >= 0 else f"净利润{v:,.2f}元，由盈转亏")
            gold_np = round(v / 1e8, 6)
        text = f"{r['company_full']}{r['year']}年年度报告摘要：报告期内公司实现" + "，".join(parts) + "。"
        out.append(["", r["company_short"], "", "", "", "", text, gold_rev, gold_np, "", ""])
        if len(out) >= limit:
            break
    return out


def build_gold(path: Path, tushare: int = 70, finglm: int = 60) -> Path | None:
    if not (DATA / "finglm_numeric_ground_truth.jsonl").is_file():
        return None
    rows = _tushare_rows(tushare) + _finglm_rows(finglm)
    # FinGLM names companies, not codes: give each a distinct placeholder code the screen accepts
    for i, row in enumerate(rows):
        if not row[0]:
            row[0] = f"{900000 + i}.SH"
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows(rows)
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench gold OUT.csv", file=sys.stderr)
        return 2
    built = build_gold(Path(argv[0]))
    print(f"wrote {built}" if built else "../shared/data not present: nothing written")
    return 0 if built else 1
