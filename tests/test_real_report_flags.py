"""Flags from figures, never from a loose word: on the real annual reports in ``../shared/data`` (when
there, never committed), no profitable company is flagged 亏损 by code's own reading."""

from __future__ import annotations

import json

import pytest
from test_documents import SHARED

from xladdin.reading.documents import read_document
from xladdin.tasks.rules import Flag, audit_figures

GOLD = SHARED / "annual_reports" / "gold.jsonl"


@pytest.mark.slow
@pytest.mark.skipif(not GOLD.is_file(), reason="../shared/data annual reports not present")
def test_no_profitable_real_report_is_flagged_as_a_loss():
    flagged = []
    for line in GOLD.read_text(encoding="utf-8").splitlines():
        g = json.loads(line)
        if g.get("net_profit") is None or g["net_profit"] <= 0:
            continue
        a = audit_figures(read_document(GOLD.parent / g["file"]), {}, 0.05)
        if Flag.LOSS in a.flags:
            flagged.append((g["file"], a.loss))
    assert flagged == []


@pytest.mark.slow
@pytest.mark.skipif(not GOLD.is_file(), reason="../shared/data annual reports not present")
def test_no_real_report_is_doubtful_by_comparing_different_lines():
    """Issue 46: 数据存疑 compared different lines (营业总收入 against 营业收入, a segment's or the consolidated
    profit against the company's attributable one, EPS against the year-end share count). Every report's
    figures agree within rounding with the gold, so code's reading finds no doubt on any of them."""
    doubted = []
    for line in GOLD.read_text(encoding="utf-8").splitlines():
        g = json.loads(line)
        a = audit_figures(read_document(GOLD.parent / g["file"]), {}, 0.05)
        if Flag.DOUBTFUL in a.flags:
            doubted.append((g["file"], [n for n in a.notes if " vs " in n]))
    assert doubted == []
