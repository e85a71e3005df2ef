"""Annual-report PDFs whose key-figure tables are ruled (each cell's borders drawn, as most A-share
reports print them), made with reportlab: a cell may span columns (``None`` after it) or rows (``"^"``
under it), and hold lines of its own (``"\\n"``); numbers stand right-aligned, words left, and a cell
written ``"<…"`` starts at its left edge (a figure too wide for its column runs into the next one)."""

from __future__ import annotations

import re
from pathlib import Path

NUMBER = re.compile(r"^[-(]?[\d,.]+%?\)?$")


def draw_table(c, x: float, top: float, widths: list[float], rows: list[list[str | None]], line_h: float = 12.0,
               font: str = "STSong-Light", size: float = 8.0) -> float:
    """Draw ``rows`` as a ruled table from (``x``, ``top``) down; the y of its bottom edge."""
    heights = [line_h * max(1, *(len(str(v).split("\n")) for v in row if v not in (None, "^"))) + 4 for row in rows]
    ys = [top]
    for h in heights:
        ys.append(ys[-1] - h)
    xs = [x]
    for w in widths:
        xs.append(xs[-1] + w)
    c.setFont(font, size)
    c.setLineWidth(0.5)
    for r, row in enumerate(rows):
        for k, value in enumerate(row):
            if value is None or value == "^":
                continue
            right = k + 1
            while right < len(row) and row[right] is None:
                right += 1
            bottom = r + 1
            while bottom < len(rows) and rows[bottom][k] == "^":
                bottom += 1
            x0, x1, y0, y1 = xs[k], xs[right], ys[bottom], ys[r]
            c.rect(x0, y0, x1 - x0, y1 - y0)
            lines = str(value).split("\n")
            first = (y1 + y0) / 2 + (len(lines) - 1) * line_h / 2 - size / 3
            for i, text in enumerate(lines):
                y = first - i * line_h
                if text.startswith("<"):
                    c.drawString(x0 + 2, y, text[1:])
                elif NUMBER.match(text):
                    c.drawRightString(x1 - 2, y, text)
                else:
                    c.drawString(x0 + 2, y, text)
    return ys[-1]


def write_ruled_pdf(path: Path, pages: list[list]) -> Path:
    """One list per page of lines (str; ``">…"`` right-aligned) and tables (``(widths, rows)``), drawn down the
    page in order. A page's list may open with its options: ``{"turned": True}`` (a landscape page as PDFs
    make one: its content drawn turned a quarter, the page marked /Rotate 90 so it shows upright),
    ``{"form": (dx, dy)}`` (everything drawn in a form XObject, placed moved by dx, dy)."""
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.pdfgen import canvas

    pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
    c = canvas.Canvas(str(path))
    for n, items in enumerate(pages):
        options = items[0] if items and isinstance(items[0], dict) else {}
        items = items[1:] if options else items
        if options.get("turned"):
            c.setPageRotation(90)
            c.saveState()
            c.translate(595.27, 0)  # A4's width: the content's x runs up the page, its y to the left
            c.rotate(90)
        if "form" in options:
            c.beginForm(f"page{n}")
        y = 560.0 if options.get("turned") else 800.0
        for item in items:
            if isinstance(item, str):
                c.setFont("STSong-Light", 10)
                # PDFium's text gives nothing of a text object of one glyph: a space after it keeps it
                text = item[1:] + " " * (len(item) == 2) if item.startswith(">") else item + " " * (len(item) == 1)
                if item.startswith(">"):  # right-aligned, at the tables' right edge (a 摘要's bare 元)
                    c.drawRightString(555, y, text)
                else:
                    c.drawString(40, y, text)
                y -= 16
            else:
                widths, rows = item
                y = draw_table(c, 40, y, widths, rows) - 16
        if "form" in options:
            c.endForm()
            c.saveState()
            c.translate(*options["form"])
            c.doForm(f"page{n}")
            c.restoreState()
        if options.get("turned"):
            c.restoreState()
        c.showPage()
    c.save()
    return Path(path)
