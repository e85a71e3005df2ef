"""The key-figure tables of a PDF report read by position: pdfplumber's table finder (cells from the
table's ruling lines, on the lines and characters PDFium has read: ``geometry``) on the few pages
that hold them, each table added after its page's text as pipe
rows, one row a line: ``| 营业收入 | 31,279,699,772.91 | 32,957,169,192.11 | | -5.09 |``, after the
lines above it that state its unit.

In a PDF's text layer a table is its characters in drawing order: a label wrapped over lines, a
header whose 调整后/调整前 stand under one year, an empty cell that leaves no trace, a change cell split
over two lines. Read by the cells' boxes, each cell is whole (its wrapped lines joined) and keeps its
column, empty or not, so the reader (``tables.py``) places each figure by its column's header,
never by counting numbers. The page's text is kept as it was (the text reader reads it first, and
the prose readers and the model read it); a page where no ruled table is found gets nothing added.
"""

from __future__ import annotations

import io
import logging
import re
import types
from typing import Any

from . import geometry
from .tables import PAGE_BREAK, PIPE, ROWS, pipe_row, read_key_tables

log = logging.getLogger(__name__)

# a page that holds (or continues) the key-figure tables: its title, not a table of contents' line
_KEY_TITLE = re.compile(r"主要会计数据|主要财务指标")
_CHAPTER = re.compile(r"第[一二三四五六七八九十\d]+[节章]")  # 第二节 公司简介和主要财务指标: the chapter, not the table
_CONTENTS = re.compile(r"目\s*录|\.{6,}|…{3,}|·{6,}")
MAX_PAGES = 6  # pages a report's key tables are looked for on (the titled ones and each one's next page)
_UNIT_LINE = re.compile(r"单位|币种|^\s*(?:人民币)?(?:元|千元|万元|百万元)\s*$")  # a 摘要's bare 元 too
MAX_TABLE_CELLS = 4000  # a "table" larger than this is a page's grid of lines, not a key-figure table


def key_table_pages(pages: list[str]) -> list[int]:
    """The pages (from 0) whose text titles a key-figure table, each with the page after it (a table
    goes on over a page break); not a table of contents."""
    found: list[int] = []
    for i, text in enumerate(pages):
        if not _KEY_TITLE.search(re.sub(r"\s+", "", text)):  # most pages: no such title
            continue
        titled = any(_KEY_TITLE.search(flat) and not _CHAPTER.match(flat)
                     for flat in (re.sub(r"\s+", "", line) for line in text.split("\n")))
        if titled and not _CONTENTS.search(text):
            for j in (i, i + 1):
                if j < len(pages) and j not in found:
                    found.append(j)
        if len(found) >= MAX_PAGES:
            break
    return found[:MAX_PAGES]


def _cell(value: Any) -> str:
    """A cell's text on one line: its wrapped lines joined (a label, a change split as ``增加1.35个百`` /
    ``分点``), a pipe inside it made a full-width one."""
    if value is None:
        return ""
    lines = [part.strip() for part in str(value).split("\n")]
    text = ""
    for part in lines:
        if not part:
            continue
        # words of Latin letters keep their space; Chinese and numbers wrapped mid-word are joined
        join = " " if text and text[-1].isascii() and text[-1].isalpha() and part[0].isascii() and part[0].isalpha() \
            else ""
        text += join + part
    return text.replace(PIPE, "｜")


def _tables(page: Any, text_in: Any) -> str | None:
    """The page's ruled tables as pipe rows, in order down the page, each after the lines above it that
    state a unit (单位：元, 币种：人民币); ``None`` when the page has none. ``page``: pdfplumber's page or
    ``geometry.Page``; ``text_in(x0, top, x1, bottom)``: the text of a region of it."""
    tables = [t for t in page.find_tables() if t.cells and len(t.cells) <= MAX_TABLE_CELLS]
    if not tables:
        return None
    tables.sort(key=lambda t: t.bbox[1])
    parts: list[str] = []
    top = 0.0
    for t in tables:
        t_top, t_bottom = t.bbox[1], t.bbox[3]
        if t_top > top:
            above = text_in(0, top, page.width, min(t_top, page.height)) or ""
            parts += [line for line in above.split("\n") if _UNIT_LINE.search(line)]
        parts += [pipe_row([_cell(c) for c in r]) for r in _extract(t) if any(c not in (None, "") for c in r)]
        top = max(top, t_bottom)
    return "\n".join(parts)


def _extract(table: Any) -> list[list[str | None]]:
    """``table.extract()``, given only the characters inside the table: pdfplumber's extract tests every
    character of the page against each row, and a character of a row is one of the table's by the same
    test (a row's box is inside the table's): the same cells, fewer tests."""
    from pdfplumber.table import Table

    x0, top, x1, bottom = table.bbox
    inside = [c for c in table.page.chars
              if x0 <= (c["x0"] + c["x1"]) / 2 < x1 and top <= (c["top"] + c["bottom"]) / 2 < bottom]
    return Table(types.SimpleNamespace(chars=inside), table.cells).extract()


def with_tables(doc: Any, pages: list[str], name: str = "") -> list[str]:
    """``pages`` (the text of ``doc``, a pypdfium2 document) with each key-figure table's cells after its
    page's text (see the module), where the text reading leaves a key figure out. A page's lines and
    characters are PDFium's (``geometry``); a page that cannot give them is parsed by pdfplumber; any page
    neither can read keeps its text alone."""
    wanted = key_table_pages(pages)
    if not wanted or _complete(pages, wanted):
        return pages
    try:
        import pdfplumber.table  # noqa: F401  (its table finder reads the cells)
    except ImportError:  # the text reader alone
        return pages
    out = list(pages)
    parse: list[int] = []  # pages for pdfplumber to parse
    for i in wanted:
        page = doc[i]
        textpage = page.get_textpage()
        try:
            drawn = geometry.read(page, textpage)
            if drawn is None:
                parse.append(i)
                continue
            block = _tables(drawn, drawn.text_in)
        except Exception as e:  # a page's drawing that cannot be followed: its text as it was
            log.debug("%s page %d: tables not read (%s)", name, i + 1, e)
            continue
        finally:
            textpage.close()
            page.close()
        if block:
            out[i] = pages[i] + "\n" + block
            if _complete(out, wanted):  # every key figure read: the pages after are not read
                return out
    return _parsed(doc, out, parse, name) if parse else out


def _parsed(doc: Any, pages: list[str], wanted: list[int], name: str) -> list[str]:
    """``pages`` with the tables pdfplumber reads on the ``wanted`` pages (it parses them itself)."""
    import pdfplumber
    import pypdfium2 as pdfium

    out = list(pages)
    try:  # only the pages wanted, as a document of their own: pdfplumber parses none of the others
        part = pdfium.PdfDocument.new()
        try:
            part.import_pages(doc, wanted)
            buffer = io.BytesIO()
            part.save(buffer)
        finally:
            part.close()
        with pdfplumber.open(buffer) as pdf:
            for k, i in enumerate(wanted):
                page = pdf.pages[k]
                try:
                    block = _tables(page, lambda *box, page=page: page.crop(box).extract_text())
                except Exception as e:  # a page's drawing pdfplumber cannot follow: its text as it was
                    log.debug("%s page %d: tables not read (%s)", name, i + 1, e)
                    continue
                finally:
                    page.flush_cache()
                if block:
                    out[i] = pages[i] + "\n" + block
                    if _complete(out, wanted):
                        break
    except Exception as e:  # pdfplumber cannot open what pdfium read: the text as it was
        log.debug("%s: tables not read (%s)", name, e)
        return pages
    return out


def _complete(pages: list[str], wanted: list[int]) -> bool:
    """Whether the text reading finds every key figure of the tables on the ``wanted`` pages (nothing for
    the cells to add); only those pages are read for it."""
    read = read_key_tables(PAGE_BREAK.join(pages[min(wanted) : max(wanted) + 1]))
    return set(ROWS) <= read.rows.keys()
