"""What the model is given of a long report: chosen, not cut.

A report longer than the budget (characters that fit the engine's context, ``Batcher`` sizes it)
is given as its sections that carry the figures and the management discussion — 主要会计数据 /
主要财务指标, then 经营情况讨论与分析 / 管理层讨论与分析 — then its opening and later sentences
with digits while they fit. Code reads the tables itself; the excerpt is what the model reads, and
the result says how much of the text that was and from where (``Excerpt.scope``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..reading.cell_values import trim_text
from ..reading.document import Document
from ..reading.sections import HEADINGS, section_starts
from ..reading.tables import PAGE_BREAK, page_of

# each section ``reading.sections`` finds (its label), the share of the budget it gets at most
SHARES: dict[str, float] = {"主要会计数据": 0.35, "经营情况讨论与分析": 0.45}


@dataclass(frozen=True)
class Excerpt:
    text: str
    trimmed: bool  # the model did not get the whole text
    scope: str  # what it got, in words ("" for the whole text)


def _pages(text: str, start: int, end: int) -> str:
    a, b = page_of(text, start), page_of(text, max(start, end - 1))
    return f"第{a}页" if a == b else f"第{a}-{b}页"


def excerpt(text: str, limit: int, skip: frozenset[str] = frozenset()) -> Excerpt:
    """At most ``limit`` characters of ``text`` for the model (page breaks as new lines); ``skip``: the
    labels of sections the model need not read (a figure table code has read). Chosen once per
    ``Document``, limit and skip (a row's prompt and its result's scope both ask)."""
    if not isinstance(text, Document):
        return _excerpt(text, limit, skip)
    name = f"excerpt:{limit}:{','.join(sorted(skip))}"
    chosen = text.kept(name)
    return chosen if chosen is not None else text.keep(name, _excerpt(text, limit, skip))


def _excerpt(text: str, limit: int, skip: frozenset[str]) -> Excerpt:
    if len(text) <= limit:
        return Excerpt(text.replace(PAGE_BREAK, "\n"), False, "")
    parts: list[tuple[int, int, str]] = []
    starts = section_starts(text)
    for label, _ in HEADINGS:  # in the order they are taken; one found without a share: a KeyError, not dropped
        if label in skip or label not in starts:
            continue
        span = starts[label], min(len(text), starts[label] + int(limit * SHARES[label]))
        if not any(a <= span[0] < b for a, b, _ in parts):
            parts.append((*span, label))
    used = sum(b - a for a, b, _ in parts)
    rest = limit - used - 2 * len(parts)
    pieces = []
    if rest >= 50:
        # the rest of the budget: the opening and later sentences with digits, from what is not taken yet
        remaining = "".join(text[a:b] for a, b in _gaps(len(text), parts))
        head, _ = trim_text(remaining, rest)
        pieces.append(("开头及含数字的句子", head))
    for a, b, label in sorted(parts):
        pieces.append((f"{label}({_pages(text, a, b)})" if PAGE_BREAK in text else label, text[a:b]))
    body = "\n…\n".join(p for _, p in pieces).replace(PAGE_BREAK, "\n")[:limit]
    scope = f"读了全文{len(text):,}字中的{len(body):,}字: " + ", ".join(label for label, _ in pieces)
    return Excerpt(body, True, scope)


def _gaps(n: int, parts: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    out, at = [], 0
    for a, b, _ in sorted(parts):
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < n:
        out.append((at, n))
    return out
