"""Where a long report's sections begin, a reading of its text: the key-figure tables (主要会计数据 /
主要财务指标) and the management discussion (经营情况讨论与分析 / 管理层讨论与分析 …), each at its first
heading that is not a line of a table of contents. What the model is given of a long report starts
from them (``tasks.base.excerpt``); a report file's are found in its reader process, with its other
readings (``figures.readings``)."""

from __future__ import annotations

import re

from .document import read_once

# (label, heading): the sections in the order an excerpt takes them
HEADINGS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("主要会计数据", re.compile(r"主要会计数据和财务指标|主要会计数据")),
    ("经营情况讨论与分析", re.compile(r"经营情况讨论与分析|管理层讨论与分析|董事会报告|经营情况回顾|业绩回顾")),
)
# a heading followed within 400 characters by dot leaders or another chapter number is a table of contents'
_TOC = re.compile(r"(\.{4,}|…{2,}|·{4,})|第[一二三四五六七八九十]+节.{0,30}第[一二三四五六七八九十]+节", re.S)
TOC_WINDOW = 400


@read_once
def section_starts(text: str) -> dict[str, int]:
    """Where each section's first heading outside a table of contents is, by label (a section with none
    is absent)."""
    found = {}
    for label, heading in HEADINGS:
        for m in heading.finditer(text):
            if not _TOC.search(text, m.start(), m.start() + TOC_WINDOW):
                found[label] = m.start()
                break
    return found
