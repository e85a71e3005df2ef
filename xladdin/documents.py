"""Report files as text: ``.pdf`` (text layer, page by page), ``.txt``/``.md`` and ``.html``.

A document's pages are joined with a form feed (``\\f``), so code that reads the text can say on
which page a quote stands (``tasks.tables.page_of``). PDFs are read with pypdfium2 (PDFium; Apache-2.0 /
BSD-3), chosen against pdfplumber (MIT) on the same files, side by side: ``python -m bench
documents`` (``bench/results/documents.json``: speed per page and which table figures code finds).
A missing, encrypted, scanned (no text layer) or damaged file is an ``InputError`` naming the
file; the other rows of a pool go on.

This is the only module that opens report files: every front door calls ``attach`` before a row
is parsed, so the task sees text (tasks never do I/O), and the cache key holds the text itself
(the document's content), never its path.
"""

from __future__ import annotations

import functools
import html.parser
import os
import re
from pathlib import Path
from typing import Any

from .errors import InputError
from .tasks.tables import PAGE_BREAK

SUFFIXES = (".pdf", ".txt", ".md", ".html", ".htm")
MIN_CHARS_PER_PAGE = 20  # a PDF with less text than this per page is a scan without a text layer
FIELD = "report_file"


def attach(record: Any) -> Any:
    """``record`` with the text of its ``report_file`` as ``report_text`` (a relative path from the
    current folder: the front doors make it absolute first, ``from_folder``); a record without a file
    is returned as it is. Raises ``InputError``."""
    if not isinstance(record, dict):
        return record
    given = record.get(FIELD)
    text = record.get("report_text")
    if given is None and isinstance(text, str) and _looks_like_path(text):
        record = {**record, FIELD: text.strip(), "report_text": None}  # a path where the text goes (a cell)
        given = record[FIELD]
    if given is None or (isinstance(given, str) and not given.strip()) or (isinstance(given, float) and given != given):
        return record
    path = Path(str(given).strip()).expanduser()
    text = read_document(path)
    own = record.get("report_text")
    if isinstance(own, str) and own.strip():  # a summary typed beside the file comes first (page 1 keeps its number)
        text = own.strip() + "\n" + text
    return {**record, "report_text": text, FIELD: path.name}


def from_folder(record: Any, folder: Path | None) -> Any:
    """``record`` with a relative report path (in ``report_file``, or where the text goes) taken from
    ``folder`` (a workbook's, a pool file's)."""
    if folder is None or not isinstance(record, dict):
        return record
    for name in (FIELD, "report_text"):
        value = record.get(name)
        if isinstance(value, str) and (name == FIELD or _looks_like_path(value)) and value.strip():
            path = Path(value.strip()).expanduser()
            if not path.is_absolute():
                return {**record, name: str(folder / path)}
    return record


def _looks_like_path(text: str) -> bool:
    t = text.strip()
    return 0 < len(t) < 400 and "\n" not in t and t.lower().endswith(SUFFIXES)


def read_document(path: str | Path) -> str:
    """The text of a report file (pages joined by ``\\f``); remembered while the file is unchanged."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        raise InputError(FIELD, f"{path}: file not found") from None
    if not path.is_file():
        raise InputError(FIELD, f"{path}: not a file")
    return _read(str(path.resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=32)
def _read(path: str, mtime_ns: int, size: int) -> str:
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(FIELD, f"{p.name}: expected one of {', '.join(SUFFIXES)}")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(FIELD, f"{p.name}: cannot be read ({e.strerror or e})") from None
    if suffix == ".pdf":
        return _pdf(p, raw)
    text = decode_text(raw, p.name, FIELD)
    if suffix in (".html", ".htm"):
        text = _html_text(text)
    if not text.strip():
        raise InputError(FIELD, f"{p.name} is empty")
    return text


def decode_text(raw: bytes, name: str, field: str) -> str:
    """A text file's text: UTF-16 with its byte-order mark (Excel's "Unicode Text"), else UTF-8 or GBK;
    anything else is an ``InputError`` of ``field`` naming the file."""
    bom = raw.startswith((b"\xff\xfe", b"\xfe\xff"))
    for encoding in ("utf-16",) if bom else ("utf-8-sig", "gb18030"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise InputError(field, f"{name}: not UTF-8, UTF-16 or GBK text (save it as UTF-8)")


def _pdf(p: Path, raw: bytes) -> str:
    import pypdfium2 as pdfium

    if not raw.startswith(b"%PDF"):
        raise InputError(FIELD, f"{p.name} is not a PDF (damaged, or another kind of file)")
    try:
        doc = pdfium.PdfDocument(raw)
    except pdfium.PdfiumError as e:
        if "password" in str(e).lower():
            raise InputError(FIELD, f"{p.name} is encrypted (password protected): save an unprotected copy") \
                from None
        raise InputError(FIELD, f"{p.name} is a damaged PDF ({e})") from None
    try:
        pages = []
        for i in range(len(doc)):
            page = doc[i]
            textpage = page.get_textpage()
            pages.append(textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n"))
            textpage.close()
            page.close()
    except pdfium.PdfiumError as e:
        raise InputError(FIELD, f"{p.name}: cannot read its pages ({e})") from None
    finally:
        doc.close()
    chars = sum(len(re.sub(r"\s+", "", t)) for t in pages)
    if not pages or chars < MIN_CHARS_PER_PAGE * len(pages):
        raise InputError(FIELD, f"{p.name} has no text layer (a scan?): run OCR on it first, e.g. ocrmypdf")
    return PAGE_BREAK.join(pages)


class _HtmlText(html.parser.HTMLParser):
    """Text of an HTML page: table cells separated by spaces, rows and blocks by new lines."""

    BLOCKS = frozenset({"p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table", "section"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _html_text(text: str) -> str:
    parser = _HtmlText()
    parser.feed(text)
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)


def match_reports(codes: list[str], folder: Path) -> dict[str, Path]:
    """Report files in ``folder`` by the six-digit stock code in their names (``603339_年报.pdf``);
    a code with several files gets the newest."""
    if not folder.is_dir():
        raise InputError("reports", f"{folder}: not a folder")
    wanted = {c[:6] for c in codes}
    found: dict[str, Path] = {}
    for entry in os.scandir(folder):
        if not entry.is_file() or Path(entry.name).suffix.lower() not in SUFFIXES:
            continue
        for digits in re.findall(r"(?<!\d)(\d{6})(?!\d)", entry.name):
            if digits in wanted:
                path = Path(entry.path)
                if digits not in found or path.stat().st_mtime > found[digits].stat().st_mtime:
                    found[digits] = path
                break
    return found
