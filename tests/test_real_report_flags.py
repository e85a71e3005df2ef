"""Flags from figures, never from a loose word: on the real annual reports in ``../shared/data`` (when
there, never committed), no profitable company is flagged 亏损 by code's own reading."""

from __future__ import annotations

import json

import pytest
from test_documents import SHARED

from xladdin.reading.documents import read_document
from xladdin.tasks.audit import audit_figures
from xladdin.tasks.rules import Flag

GOLD = SHARED / "annual_reports" / "gold.jsonl"


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
