"""A PDF page's characters and ruling lines read by PDFium, in the form pdfplumber's table finder takes.

pdfplumber finds a table's cells from the lines drawn on a page and places each character in its
cell; to get the lines and characters it parses the page's content itself (pdfminer, pure Python:
about a tenth of a second for a key-figure page, most of what reading a report costs where its
tables are read by position). PDFium has parsed the page already: here each path's segments become
pdfplumber's edges (a straight segment a line, every side of a rectangle one) and each character
its loose box, both in pdfplumber's coordinates (from the page's top left), and pdfplumber's own
``TableFinder`` and ``Table.extract`` read the cells. A page this cannot take (rotated, or no
straight line drawn on it) is ``None``: the caller reads it with pdfplumber.
"""

from __future__ import annotations

import ctypes
from typing import Any

MAX_OBJECTS = 50_000  # page objects looked at (a page drawn as a picture of strokes is no table)
MAX_DEPTH = 4  # form objects within form objects followed


class Page:
    """What pdfplumber's ``TableFinder`` and ``Table.extract`` read of a page: ``edges``, ``chars``,
    ``bbox``; ``text_in`` the text of a region, as ``page.crop(box).extract_text()`` gives it."""

    def __init__(self, width: float, height: float, edges: list[dict[str, Any]], chars: list[dict[str, Any]],
                 textpage: Any, top: float, left: float):
        self.width, self.height = width, height
        self.bbox = (0.0, 0.0, width, height)
        self.edges = edges
        self.chars = chars
        self._textpage, self._top, self._left = textpage, top, left

    def find_tables(self) -> list[Any]:
        from pdfplumber.table import TableFinder

        return TableFinder(self, {}).tables

    def text_in(self, x0: float, top: float, x1: float, bottom: float) -> str:
        """The text of the region (pdfplumber's coordinates), lines as lines."""
        text = self._textpage.get_text_bounded(left=self._left + x0, bottom=self._top - bottom,
                                               right=self._left + x1, top=self._top - top)
        return text.replace("\r\n", "\n").replace("\r", "\n")


def read(page: Any, textpage: Any) -> Page | None:
    """``page`` (a pypdfium2 page) and its text page as a :class:`Page`, or ``None`` (see the module)."""
    import pypdfium2.raw as pdfium_c

    if page.get_rotation() % 360:
        return None
    left, bottom, right, top = page.get_mediabox()
    width, height = right - left, top - bottom
    edges: list[dict[str, Any]] = []
    count = [0]

    def point(x: float, y: float, m: tuple[float, ...]) -> tuple[float, float]:
        a, b, c, d, e, f = m
        return round(a * x + c * y + e - left, 3), round(top - (b * x + d * y + f), 3)

    def path(obj: Any, m: tuple[float, ...]) -> None:
        x, y = ctypes.c_float(), ctypes.c_float()
        start: tuple[float, float] | None = None
        last: tuple[float, float] | None = None
        for i in range(pdfium_c.FPDFPath_CountSegments(obj)):
            seg = pdfium_c.FPDFPath_GetPathSegment(obj, i)
            if not pdfium_c.FPDFPathSegment_GetPoint(seg, x, y):
                continue
            p = point(x.value, y.value, m)
            kind = pdfium_c.FPDFPathSegment_GetType(seg)
            if kind == pdfium_c.FPDF_SEGMENT_LINETO and last is not None:
                _edge(edges, last, p)
            if kind == pdfium_c.FPDF_SEGMENT_MOVETO:
                start = p
            last = p
            if pdfium_c.FPDFPathSegment_GetClose(seg) and start is not None:
                _edge(edges, p, start)
                last = start

    def walk(container: Any, n: int, get: Any, parent: tuple[float, ...], depth: int) -> bool:
        matrix = pdfium_c.FS_MATRIX()
        for i in range(n):
            count[0] += 1
            if count[0] > MAX_OBJECTS:
                return False
            obj = get(container, i)
            kind = pdfium_c.FPDFPageObj_GetType(obj)
            if kind not in (pdfium_c.FPDF_PAGEOBJ_PATH, pdfium_c.FPDF_PAGEOBJ_FORM):
                continue
            if not pdfium_c.FPDFPageObj_GetMatrix(obj, matrix):
                continue
            m = _times((matrix.a, matrix.b, matrix.c, matrix.d, matrix.e, matrix.f), parent)
            if kind == pdfium_c.FPDF_PAGEOBJ_PATH:
                path(obj, m)
            elif depth < MAX_DEPTH and not walk(obj, pdfium_c.FPDFFormObj_CountObjects(obj),
                                                pdfium_c.FPDFFormObj_GetObject, m, depth + 1):
                return False
        return True

    raw = page.raw
    if not walk(raw, pdfium_c.FPDFPage_CountObjects(raw), pdfium_c.FPDFPage_GetObject, (1, 0, 0, 1, 0, 0), 0):
        return None
    if not edges:
        return None
    return Page(width, height, edges, _chars(textpage, left, top), textpage, top, left)


def _times(m: tuple[float, ...], parent: tuple[float, ...]) -> tuple[float, ...]:
    """``m`` then ``parent`` (a form's matrix applies to what it holds)."""
    a, b, c, d, e, f = m
    pa, pb, pc, pd, pe, pf = parent
    return (a * pa + b * pc, a * pb + b * pd, c * pa + d * pc, c * pb + d * pd,
            e * pa + f * pc + pe, e * pb + f * pd + pf)


def _edge(edges: list[dict[str, Any]], p0: tuple[float, float], p1: tuple[float, float]) -> None:
    """A straight segment as pdfplumber's edge (only a level or upright one can rule a table)."""
    if p0[0] == p1[0]:
        orientation = "v"
    elif p0[1] == p1[1]:
        orientation = "h"
    else:
        return
    x0, x1 = sorted((p0[0], p1[0]))
    t, b = sorted((p0[1], p1[1]))
    edges.append({"object_type": "curve_edge", "x0": x0, "x1": x1, "top": t, "bottom": b, "doctop": t,
                  "width": x1 - x0, "height": b - t, "orientation": orientation})


def _chars(textpage: Any, left: float, top: float) -> list[dict[str, Any]]:
    """The page's characters (not those PDFium makes up between words and lines), each with its loose box."""
    import pypdfium2.raw as pdfium_c

    raw = textpage.raw
    rect = pdfium_c.FS_RECTF()
    out: list[dict[str, Any]] = []
    for i in range(pdfium_c.FPDFText_CountChars(raw)):
        code = pdfium_c.FPDFText_GetUnicode(raw, i)
        if code in (0, 10, 13) or pdfium_c.FPDFText_IsGenerated(raw, i) == 1:
            continue
        if not pdfium_c.FPDFText_GetLooseCharBox(raw, i, rect):
            continue
        x0, x1 = rect.left - left, rect.right - left
        t, b = top - rect.top, top - rect.bottom
        out.append({"object_type": "char", "text": chr(code), "x0": x0, "x1": x1, "top": t, "bottom": b,
                    "doctop": t, "width": x1 - x0, "height": b - t, "size": b - t, "upright": True})
    return out
