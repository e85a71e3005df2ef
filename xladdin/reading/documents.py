"""Report files as text: ``.pdf`` (text layer, page by page), ``.txt``/``.md`` and ``.html``.

A document's pages are joined with a form feed (``\\f``), so code that reads the text can say on
which page a quote stands (``tables.page_of``). PDFs are read with pypdfium2 (PDFium; Apache-2.0 /
BSD-3), chosen against pdfplumber (MIT) on the same files, side by side: ``python -m bench
documents`` (``bench/results/documents.json``: speed per page and which table figures code finds).
A missing, encrypted, scanned (no text layer) or damaged file is an ``InputError`` naming the
file; the other rows of a pool go on.

This is the only module that opens report files: every front door calls ``attach`` before a row
is parsed, so the task sees text (tasks never do I/O), and the cache key holds the text itself
(the document's content), never its path.

A file is read only from where the user pointed: a front door ``place``s each row's path with its
``Reports`` (the pool's or workbook's folder, ``--reports DIR``, the ``report_dirs`` setting), and
``attach`` opens nothing but such a ``ReportPath`` inside those folders (symlinks resolved, ``..``
refused), of at most ``max_report_mib``. A pool or workbook from someone else cannot make the product
read, and send to the engine, a file outside them.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import html.parser
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import periods
from ..errors import InputError
from . import layout
from .figures import report_dates
from .tables import PAGE_BREAK

SUFFIXES = (".pdf", ".txt", ".md", ".html", ".htm")
MIN_CHARS_PER_PAGE = 20  # a PDF with less text than this per page is a scan without a text layer
FIELD = "report_file"
MIB = 1 << 20
ALLOW_HINT = "add its folder to report_dirs (XLADDIN_REPORT_DIRS, folders separated by os.pathsep)"
# a report text that ends in ".pdf" is a path only without sentence punctuation: "营业收入1505.60亿元，详见年报.pdf"
# is text that names a file, "603339_年报.pdf" a file
_SENTENCE = re.compile(r"[，。；！？、：,;!?]")
_WEB = re.compile(r"://|(?:^|[\s/])www\.", re.IGNORECASE)
_FULL_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\|/|~[\\/])")  # C:\, \\server, /, ~/


@dataclass(frozen=True)
class Reports:
    """Where report files may be read from, and how large one may be: a front door's, per run or
    workbook. ``folders`` are the pool's or workbook's folder, ``--reports DIR`` and ``report_dirs``;
    ``refused``: the pool's or workbook's folder when it is not one (with why)."""

    folders: tuple[Path, ...]
    max_bytes: int = 64 * MIB
    refused: str | None = None

    @classmethod
    def of(cls, settings: Any, own: str | Path | None, *folders: str | Path | None) -> Reports:
        """The pool's or workbook's own folder ``own`` (unless it is the home folder, a folder above it or
        a system folder: a pool saved there names no file of the user's), the folders given (``None``
        left out: ``--reports``) and the setting's ``report_dirs``, each resolved (a symlinked folder is
        the folder it points to)."""
        chosen = [Path(f).expanduser().resolve() for f in (*folders, *getattr(settings, "report_dirs", ()))
                  if f is not None]
        refused = None
        if own is not None:
            own = Path(own).expanduser().resolve()
            refused = _not_a_reports_folder(own)
            if refused is None:
                chosen.insert(0, own)
        mib = getattr(settings, "max_report_mib", None)
        return cls(tuple(dict.fromkeys(chosen)), int(mib * MIB) if mib else cls.max_bytes, refused)

    def place(self, record: Any, base: Path | None = None) -> Any:
        """``record`` with its report path (``report_file``, or a path where the text goes) as a
        ``ReportPath`` of these folders; a relative path is taken from ``base`` (the workbook's or pool
        file's folder), without one from these folders (the first that holds it). Nothing is opened here:
        ``attach`` checks and reads."""
        if not isinstance(record, dict):
            return record
        given = record.get(FIELD)
        text = record.get("report_text")
        if _blank(given) and isinstance(text, str) and looks_like_path(text):
            record = {**record, "report_text": None}  # a path where the text goes (a cell)
            given = text
        if _blank(given):
            return record
        path = Path(str(given).strip()).expanduser()
        # the folder the user chose may be written with '..' ("../pool.csv"): made absolute here, while the
        # path the pool or cell gives keeps its '..' and is refused for it (``locate``)
        if not path.is_absolute() and ".." not in path.parts:
            if base is not None:
                path = base.expanduser().resolve() / path
            elif self.folders:  # no workbook folder (the cell service): the first folder holding it
                path = next((f / path for f in self.folders if (f / path).is_file()), self.folders[0] / path)
        return {**record, FIELD: ReportPath(str(path), self)}


def _not_a_reports_folder(folder: Path) -> str | None:
    """Why a pool's or workbook's own folder is no place report files are read from, or ``None``."""
    home = Path.home().resolve()
    if folder == home or home.is_relative_to(folder):
        return f"the pool's or workbook's folder {folder} is your home folder or above it"
    for system in _SYSTEM_FOLDERS:
        if folder == system or (system != Path(folder.anchor) and folder.is_relative_to(system)):
            return f"the pool's or workbook's folder {folder} is a system folder"
    return None


_SYSTEM_FOLDERS = tuple(Path(p) for p in (
    "/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/sys", "/proc", "/dev", "/boot",
    os.environ.get("SystemRoot", "C:\\Windows"), os.environ.get("ProgramFiles", "C:\\Program Files"),
    os.environ.get("ProgramFiles(x86)", "C:\\Program Files (x86)")))


class ReportPath(str):
    """A report file's path as a front door placed it, with the ``Reports`` it may be read under:
    the only kind of path ``attach`` opens."""

    reports: Reports

    def __new__(cls, path: str, reports: Reports) -> ReportPath:
        self = super().__new__(cls, path)
        self.reports = reports
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return ReportPath, (str(self), self.reports)


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip()) or (isinstance(value, float)
                                                                              and value != value)


def attach(record: Any) -> Any:
    """``record`` with the text of its ``report_file`` as ``report_text``, read here; a record without
    a file is returned as it is. Raises ``InputError`` (a path no front door placed is refused, not
    read). The front doors read through ``readers.Reader`` instead: once per file, off their thread."""
    record, path = report_path(record)
    return record if path is None else with_text(record, path, read_document(path))


def report_path(record: Any) -> tuple[Any, ReportPath | None]:
    """``record`` (a path where the text goes moved out of its text) and its report file's path, or
    ``None`` without one. Raises ``InputError`` for a path no front door placed."""
    if not isinstance(record, dict):
        return record, None
    given = record.get(FIELD)
    text = record.get("report_text")
    if _blank(given) and isinstance(text, str) and looks_like_path(text):
        given = text
        record = {**record, "report_text": None}
    if _blank(given):
        return record, None
    if not isinstance(given, ReportPath):  # a front door that placed nothing allowed nothing
        raise InputError(FIELD, f"{given}: not read (no folder was given to read report files from; "
                         f"{ALLOW_HINT})")
    return record, given


def with_text(record: dict[str, Any], path: ReportPath, text: str) -> dict[str, Any]:
    """``record`` with its report file's ``text``: a summary typed beside the file comes first (page 1
    keeps its number); the file is named by its name only."""
    own = record.get("report_text")
    if isinstance(own, str) and own.strip():
        text = own.strip() + "\n" + text
    return {**record, "report_text": text, FIELD: Path(path).name}


def looks_like_path(text: str) -> bool:
    """Whether a cell's text is a report file's path rather than report text: it ends in a report's
    suffix, is no sentence and names no web address, and is one token (``600519_年报.pdf``,
    ``reports/600519.pdf``) or a full path, which may hold spaces (``C:\\My Documents\\年报 2023.pdf``,
    ``/home/me/年报 2023.pdf``, ``~/年报.pdf``). ``年报全文见 www.cninfo.com.cn/600519.pdf`` is text."""
    t = text.strip()
    if not (0 < len(t) < 400 and "\n" not in t and t.lower().endswith(SUFFIXES)):
        return False
    if _SENTENCE.search(t) or _WEB.search(t):
        return False
    return not re.search(r"\s", t) or bool(_FULL_PATH.match(t))


EDGE_BYTES = 64 * 1024  # of a file's start and end, hashed into its stamp


def edges(real: Path | str, size: int) -> str:
    """A cheap digest of a file's content: its first and last ``EDGE_BYTES`` (a report replaced by another of
    the same size, its modification time put back, is told apart); ``""`` when it cannot be read."""
    try:
        with open(real, "rb") as f:
            head = f.read(EDGE_BYTES)
            if size > 2 * EDGE_BYTES:
                f.seek(size - EDGE_BYTES)
                head += f.read(EDGE_BYTES)
    except OSError:
        return ""
    return hashlib.blake2b(head, digest_size=16).hexdigest()


def locate(path: ReportPath) -> tuple[Path, os.stat_result]:
    """The file ``path`` names, resolved, and its stat, once it is found inside its folders and within
    the size bound (one stat, no read). Raises ``InputError`` naming the file and the setting."""
    reports = path.reports
    given = Path(path)
    if ".." in given.parts:
        raise InputError(FIELD, f"{path}: '..' is not allowed in a report path (give the file inside the pool's "
                         "or workbook's folder, or its full path)")
    if not given.is_absolute():
        raise InputError(FIELD, f"{path}: a relative path is taken from the workbook's folder or report_dirs, "
                         f"and there is neither: give the full path, or {ALLOW_HINT}")
    try:
        real = given.resolve(strict=True)
        st = real.stat()
    except OSError:
        raise InputError(FIELD, f"{path}: file not found") from None
    inside = [folder for folder in reports.folders if real.is_relative_to(folder)]
    if not inside:
        where = ", ".join(map(str, reports.folders)) or "none"
        why = f"; {reports.refused}, whose files are read only from a folder chosen for reports" \
            if reports.refused else ""
        raise InputError(FIELD, f"{path}: outside the folders report files are read from ({where}){why}; to read "
                         f"it, {ALLOW_HINT}, or pass --reports with its folder")
    if all(any(part.startswith(".") for part in real.relative_to(folder).parts[:-1]) for folder in inside):
        raise InputError(FIELD, f"{path}: in a hidden folder, which report files are never read from; to read it, "
                         "move it to a folder of its own")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(FIELD, f"{path}: not a file")
    if st.st_size > reports.max_bytes:
        raise InputError(FIELD, f"{given.name}: {st.st_size / MIB:.1f} MiB, over the {reports.max_bytes / MIB:g} MiB "
                         "limit for report files (max_report_mib, XLADDIN_MAX_REPORT_MIB)")
    return real, st


def _named_year(name: str, dates: Any) -> tuple[int, int] | None:
    """The period a file's name gives (``2024年报``), else the one year it names (``_2024.pdf``), as an order."""
    if dates.period is not None:
        return dates.period.order
    years = set(re.findall(r"(?<!\d)((?:19|20)\d{2})(?!\d)", name))
    return (int(years.pop()), 12) if len(years) == 1 else None


def read_document(path: str | Path) -> str:
    """The text of a report file (pages joined by ``\\f``); remembered while the file is unchanged. A
    path that is not a ``ReportPath`` is a file the caller names itself (a benchmark, a test): read
    within the size bound."""
    if not isinstance(path, ReportPath):
        real = Path(path).expanduser().resolve()
        path = ReportPath(str(real), Reports((real.parent,)))
    real, st = locate(path)
    return _read(str(real), st.st_mtime_ns, st.st_size, path.reports.max_bytes, edges(real, st.st_size))


@functools.lru_cache(maxsize=32)
def _read(path: str, mtime_ns: int, size: int, max_bytes: int, content: str) -> str:
    return read_file(path, max_bytes)[1]


def read_file(path: str, max_bytes: int) -> tuple[str, str]:
    """The sha256 of the file at ``path`` (resolved and checked: ``locate``) and its text; at most
    ``max_bytes`` are read. What a reader process runs."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(FIELD, f"{p.name}: expected one of {', '.join(SUFFIXES)}")
    try:
        with p.open("rb") as f:
            raw = f.read(max_bytes + 1)  # never more than the bound, even of a file that grew since its stat
    except OSError as e:
        raise InputError(FIELD, f"{p.name}: cannot be read ({e.strerror or e})") from None
    if len(raw) > max_bytes:
        raise InputError(FIELD, f"{p.name}: over the {max_bytes / MIB:g} MiB limit for report files "
                         "(max_report_mib, XLADDIN_MAX_REPORT_MIB)")
    return hashlib.sha256(raw).hexdigest(), _text(p, suffix, raw)


def _text(p: Path, suffix: str, raw: bytes) -> str:
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


# An annual report's notes to its statements (财务报表附注: about half its pages) are not read: the figures
# code reads (the key-figure tables, the 合并利润表) and what the model is shown (the opening, the
# management discussion) all stand before them, and reading is most of a report row's CPU
# (bench/results/gpu.json, report_files_session). They start after the consolidated income statement;
# once the 合并现金流量表's 经营活动产生的现金流量净额 is read, nothing after it is either (the parent's
# statements, the statements of changes in equity).
_STATEMENT_ROWS = ("营业收入", "营业成本", "销售费用", "管理费用", "利润总额", "净利润", "所得税")
_NOTES = re.compile(r"财务报表附注|公司基本情况|财务报表的编制基础|重要会计政策及会计估计")
_INCOME_STATEMENT = re.compile(r"合并(?:及(?:母公司|本行|银行|公司))?利润表")  # a bank's: 合并及银行利润表
_CASH_STATEMENT = re.compile(r"合并(?:及(?:母公司|本行|银行|公司))?现金流量表")
READ_ALL = 5  # the stage after which nothing more is read
# The balance sheets between the auditor's report (stage 1) and the 合并利润表: no figure is read from them.
# Where a title line opens them, the 合并利润表's title line is looked for a few pages on (the page before
# the one found looked at too: a statement may print its title on each of its pages), the pages between
# not read; else reading goes on page by page.
_BALANCE_SHEET = re.compile(r"合并(?:及(?:母公司|本行|银行|公司))?资产负债表")
STATEMENT_STEPS = (4, 3, 5, 2, 6)  # pages on from a balance sheet's title looked at for the 合并利润表's
_ENUMERATOR = re.compile(r"(?:[(（]?[一二三四五六七八九十\d]{1,2}[)）、.．])?")  # 1、合并利润表, (一) …
_TITLE_TAIL = re.compile(r"[\d年月日度至续()（）\-–—]*")  # what may follow a title on its line: its date, 续


def _title_line(text: str, title: re.Pattern[str]) -> str | None:
    """The line of a page (whitespace removed) that is a statement's title (``title``, numbered or not, and
    at most its date or 续 after it: a title, not a sentence naming the statement), or None."""
    for line in text.splitlines():
        flat = re.sub(r"\s+", "", line)
        if len(flat) <= 24 and (m := title.match(flat, _ENUMERATOR.match(flat).end())) \
                and _TITLE_TAIL.fullmatch(flat, m.end()):  # type: ignore[union-attr]
            return flat
    return None


def _statement_stage(stage: int, page: str) -> int:
    """How far into the financial report a page (whitespace removed) takes the reading: the auditor's
    report, then the 合并利润表's title, then its rows (on that page or the next ones), then the
    合并现金流量表's title and its 经营活动产生的现金流量净额 (``READ_ALL``). Only in that order do the notes
    end what is read (a 公司基本情况 in the front matter ends nothing)."""
    if stage == 0 and "审计报告" in page and "审计意见" in page:
        return 1
    if stage == 1 and _INCOME_STATEMENT.search(page):
        stage = 2
    if stage == 2 and sum(row in page for row in _STATEMENT_ROWS) >= 3:
        return 3
    if stage == 3 and _CASH_STATEMENT.search(page):
        stage = 4
    if stage == 4 and "经营活动产生的现金流量净额" in page:
        return READ_ALL
    return stage


# The chapters an annual report's 目录 lists (第五节 重要事项 …… 28): those no figure, date or excerpt comes
# from are not read, from the page their title opens to the page the next chapter read opens (found by
# the offset of printed page numbers to the PDF's pages, checked on that page's title; else read). A
# chapter read is read up to the management discussion's 资产及负债状况 (its opening: what the model is
# shown of it, the results in prose, the 主营业务分行业 table; after it: assets, investments, subsidiaries,
# the outlook) and for CHAPTER_PAGES pages at most; the financial report is read to its notes (the
# auditor's report, then the statements).
_TOC_LINE = re.compile(r"第(?P<n>[一二三四五六七八九十]+)(?P<kind>[节章])\s*(?P<title>[^\s.…·\d][^\n.…·]*?)"
                       r"[\s.…·]*(?P<page>\d{1,4})\s*$"
                       # the older template's 目录 (一、重要提示……1): a leader between title and number
                       r"|^\s*(?P<n2>[一二三四五六七八九十]+)、\s*(?P<title2>[^\s.…·\d][^\n.…·]*?)\s*[.…·]{3,}[\s.…·]*"
                       r"(?P<page2>\d{1,4})\s*$", re.M)
_NOT_READ = re.compile(r"(?:[节章]|^[一二三四五六七八九十]+、)释义|业务概要|重要事项|股份变动|股本变动|优先股|债券"
                       r"|董事、?监事|监事会报告|股东大会|公司治理|内部控制|环境|社会责任|ESG")
_WHOLE = re.compile(r"财务(?:会计)?报告|财务报表")  # read to the notes, however long
# the day the report became public, as it states it, in the 公司治理 chapter not read: looked for there alone
_GOVERNANCE = re.compile(r"公司治理")
_DISCLOSURE_LINE = re.compile(r"^.*内部控制评价报告全文披露日期.*$", re.M)
TOC_PAGES = 12  # the 目录 is looked for in the first pages
CHAPTER_PAGES = 20  # pages of a chapter read (its opening), the financial report apart
NEAR_LINES = 2  # a chapter's page looked for at the numbers of the 目录's lines this near it too
PROBES = 6  # pages looked at for where a chapter opens, at most
_ENOUGH = re.compile(r"^(?:[一二三四五六七八九十]+、|[(（][一二三四五六七八九十]+[)）])"
                     r"资产(?:及|、)负债(?:状况|情况)(?:分析)?$")


@dataclass(frozen=True)
class Chapter:
    heading: str  # 第五节重要事项, whitespace removed
    page: int  # its printed page number

    @property
    def read(self) -> bool:
        return not _NOT_READ.search(self.heading)

    @property
    def whole(self) -> bool:
        return bool(_WHOLE.search(self.heading))


def _contents(text: str) -> list[Chapter]:
    """The chapters a 目录 page lists, in order (none unless four or more with rising page numbers)."""
    found = [Chapter("第" + m["n"] + m["kind"] + re.sub(r"\s+", "", m["title"]), int(m["page"])) if m["n"] else
             Chapter(m["n2"] + "、" + re.sub(r"\s+", "", m["title2"]), int(m["page2"]))
             for m in _TOC_LINE.finditer(text)]
    if len(found) < 4 or any(b.page < a.page for a, b in zip(found, found[1:], strict=False)):
        return []
    return found


def _opens(text: str, heading: str, flat: str | None = None) -> bool:
    """Whether a page's text (``flat``: without whitespace) has ``heading`` as a line of its own (a chapter
    opening on it, at its top or below the end of the one before; a mention in a sentence is no heading)."""
    if heading[:3] not in (re.sub(r"\s+", "", text) if flat is None else flat):  # most pages: no chapter opens
        return False
    for line in text.splitlines():
        flat = re.sub(r"\s+", "", line)
        if flat.startswith(heading[:6]) and len(flat) <= len(heading) + 4:
            return True
    return False


def _ends_reading(text: str, flat: str) -> bool:
    """Whether a page (``flat``: without whitespace) has the heading after which a chapter's pages are not
    read (资产及负债状况分析)."""
    if "负债" not in flat:
        return False
    return any(_ENOUGH.match(re.sub(r"\s+", "", line)) for line in text.splitlines())


class _Plan:
    """Which pages of a PDF are read, from its 目录's chapters: page by page, where to read on from."""

    def __init__(self, chapters: list[Chapter]):
        self.chapters = chapters
        self.within: tuple[int, int] | None = None  # the chapter read being read: its place and opening page
        self.offset: int | None = None  # PDF page index less printed page number, as a chapter opening gave it

    def jump(self, text: str, flat: str, index: int) -> tuple[list[int], str] | None:
        """Where to read on from after the page at ``index`` (its ``text``; ``flat``: without whitespace),
        if not the next page: the PDF pages the next chapter read may open on, and that chapter's heading."""
        for k, chapter in enumerate(self.chapters):
            if not _opens(text, chapter.heading, flat):
                continue
            if chapter.read:  # its first opening (a running header naming the chapter opens nothing)
                if self.within is None or self.within[0] != k:
                    self.within = (k, index)
                    self.offset = index - chapter.page
                break
            return self._after(k, index)
        if self.within is not None:
            k, opened = self.within
            if not self.chapters[k].whole and (index - opened + 1 >= CHAPTER_PAGES or _ends_reading(text, flat)):
                return self._after(k, opened)
        return None

    def governance(self, pages: int) -> range:
        """The PDF pages of the 公司治理 chapter, not read (empty without it or a known offset)."""
        at = next((k for k, c in enumerate(self.chapters) if _GOVERNANCE.search(c.heading)), None)
        if at is None or self.offset is None:
            return range(0)
        end = self.chapters[at + 1].page if at + 1 < len(self.chapters) else self.chapters[at].page + CHAPTER_PAGES
        return range(max(0, self.chapters[at].page + self.offset), min(pages, end + self.offset + 1))

    def _after(self, k: int, opened: int) -> tuple[list[int], str] | None:
        """The next chapter read after chapter ``k``, which opened on PDF page ``opened``: the PDF pages it may
        open on, likeliest first, and its heading. First its printed number moved by the offset of chapter
        ``k``'s; then, as a 目录's text may give its numbers in another order than its lines (the numbers set
        apart from their titles), the numbers of the lines around it, as printed (a file's pages numbered
        as its 目录 counts them) and moved so."""
        after = next((j for j in range(k + 1, len(self.chapters)) if self.chapters[j].read), None)
        if after is None:
            return None
        offset = opened - self.chapters[k].page
        near = [self.chapters[j].page for j in range(max(0, after - NEAR_LINES), min(len(self.chapters),
                                                                                   after + NEAR_LINES + 1))]
        pages = [self.chapters[after].page + offset, *(n - 1 for n in near), *(n + offset for n in near)]
        return list(dict.fromkeys(pages))[:PROBES], self.chapters[after].heading


def _income_statement_at(text: str, i: int, pages: int, look: Callable[[int], str]) -> int | None:
    """The page the 合并利润表 opens on, when the page at ``i`` (its ``text``) opens the balance sheets and
    that page is found a few pages on (``STATEMENT_STEPS``; ``look``: a page's text, read once)."""
    if _title_line(text, _BALANCE_SHEET) is None:
        return None

    def titled(t: int) -> bool:
        return _title_line(look(t), _INCOME_STATEMENT) is not None

    for step in STATEMENT_STEPS:
        t = i + step
        if t < pages and titled(t):
            while t - 1 > i and titled(t - 1):  # its title on each page: where it opens
                t -= 1
            return t
    return None


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
    def page_text(i: int) -> str:
        page = doc[i]
        textpage = page.get_textpage()
        text = textpage.get_text_range().replace("\r\n", "\n").replace("\r", "\n")
        textpage.close()
        page.close()
        return text

    try:
        pages: list[str] = []
        stage = 0  # 1: the auditor's report read, 2: the 合并利润表 begun, 3: its rows read, 4: the 合并现金流量表
        # begun, READ_ALL: its operating cash flow read
        plan: _Plan | None = None
        ahead: dict[int, str] = {}  # a page read to check a jump's target

        def look(t: int) -> str:  # a page ahead, its text kept for when reading reaches it
            if t not in ahead:
                ahead[t] = page_text(t)
            return ahead[t]

        i = chars = 0  # chars: of the pages read, whitespace apart
        while i < len(doc):
            text = ahead.pop(i, None)
            if text is None:
                text = page_text(i)
            flat = re.sub(r"\s+", "", text)
            if stage == READ_ALL or (stage >= 3 and _NOTES.search(flat)):
                break  # the notes to the statements: nothing code reads or the model is shown stands there
            stage = _statement_stage(stage, flat)
            pages.append(text)
            chars += len(flat)
            target = _income_statement_at(text, i, len(doc), look) if stage == 1 else None  # balance sheets
            if target is None and plan is None and i < TOC_PAGES:
                plan = _Plan(chapters) if (chapters := _contents(text)) else None
            elif target is None and plan is not None and (jump := plan.jump(text, flat, i)) is not None \
                    and jump[0][0] > i + 1:  # (the next chapter read opening on the next page: read on)
                targets, heading = jump
                target = next((t for t in targets if i + 1 < t < len(doc) and _opens(look(t), heading)), None)
            if target is not None:
                pages.extend([""] * (target - i - 1))  # not read: each page keeps its number
                ahead = {t: v for t, v in ahead.items() if t >= target}
                i = target
                continue
            i += 1
        read = sum(1 for t in pages if t)
        if plan is not None and not any("内部控制评价报告全文披露日期" in t for t in pages):
            for t in reversed(plan.governance(len(pages))):  # its line alone, on its page: the report's own day
                if not pages[t] and (line := _DISCLOSURE_LINE.search(page_text(t))):
                    pages[t] = line.group(0)
                    break
        if not read or chars < MIN_CHARS_PER_PAGE * read:
            raise InputError(FIELD, f"{p.name} has no text layer (a scan?): run OCR on it first, e.g. ocrmypdf")
        return PAGE_BREAK.join(layout.with_tables(doc, pages, p.name))
    except pdfium.PdfiumError as e:
        raise InputError(FIELD, f"{p.name}: cannot read its pages ({e})") from None
    finally:
        doc.close()


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


def match_reports(codes: list[str], folder: Path, as_of: dt.date | None = None,
                  left_out: dict[str, list[str]] | None = None,
                  texts: Callable[[list[Path]], dict[Path, str | None]] | None = None) -> dict[str, Path]:
    """Report files in ``folder`` by the six-digit stock code in their names (``603339_年报.pdf``). A code
    with several files gets its report (``_choose``): each file known for what it is (``report_kind``: a
    notice is never a report; a 摘要 or an English version only when no full Chinese report is there), then
    the newest period, a corrected re-release before its original, the later publication day, the later
    file. With ``as_of``, a file published after that day (or whose period had not ended) is never chosen,
    its day the latest its name and its text give (``periods``), its text telling what it is too. Each file
    passed over, and why, goes to ``left_out`` under its code. ``texts``: the texts of many files at once
    (a file that cannot be read: ``None``); default one after another here (``read_document``)."""
    if not folder.is_dir():
        raise InputError("reports", f"{folder}: not a folder")
    wanted = {c[:6] for c in codes}
    candidates: dict[str, list[Path]] = {}
    for entry in os.scandir(folder):
        if not entry.is_file() or Path(entry.name).suffix.lower() not in SUFFIXES:
            continue
        for digits in re.findall(r"(?<!\d)(\d{6})(?!\d)", entry.name):
            if digits in wanted:
                candidates.setdefault(digits, []).append(Path(entry.path))
                break
    found: dict[str, Path] = {}
    every = [p for paths in candidates.values() for p in paths]
    read = (texts or _read_texts)(every) if as_of is not None and every else {}  # a later day in its text wins
    for code, paths in candidates.items():
        notes = left_out.setdefault(code, []) if left_out is not None else []
        dates = {p: periods.from_name(p.name) for p in paths}
        for p in paths:
            if read.get(p):
                dates[p] = dates[p].combined(report_dates(read[p]))  # type: ignore[arg-type]
        if as_of is not None:
            why = {p: dates[p].not_public(as_of, undated=True) for p in paths}  # an undated file: date_rows decides
            notes.extend(f"未用 {p.name}: {why[p]}" for p in paths if why[p] is not None)
            paths = [p for p in paths if why[p] is None]
        chosen = _choose(paths, dates, {p: report_kind(p.name, read.get(p)) for p in paths}, notes)
        if chosen is not None:
            found[code] = chosen
        if left_out is not None and not notes:
            del left_out[code]
    return found


# What a file is, from its name and, when read, its title page: a notice about a report (更正公告, 补充公告)
# is no report; a 摘要 and an English version are read only when no full Chinese report is there; a
# corrected re-release (修订版, 更新后, 更正后) replaces its original.
FULL, SUMMARY, ENGLISH, NOTICE = "全文", "摘要", "英文版", "公告"
_CORRECTED = re.compile(r"修订版|修订稿|修订后|更新后|更正后|更新版|[(（]更新[)）]|[(（]修订[)）]")
_NOTICE = re.compile(r"(?:更正|补充|更新|修订)(?:的)?(?:公告|说明)|提示性公告|关于.{0,40}的公告|公告$")
_SUMMARY = re.compile(r"摘要|summary", re.I)
_ENGLISH = re.compile(r"英文|english|(?<![a-z])en(?![a-z])", re.I)
_TITLE_CHARS = 1500  # a title page's text looked at


def report_kind(name: str, text: str | None = None) -> tuple[str, bool]:
    """(what the file is: ``FULL``, ``SUMMARY``, ``ENGLISH`` or ``NOTICE``; whether it is a corrected
    re-release) from its name and, when read, its title page (``text``)."""
    stem = name.rsplit(".", 1)[0]
    corrected = bool(_CORRECTED.search(stem))
    title = (text or "")[:_TITLE_CHARS]
    if _NOTICE.search(stem) and not corrected or (title and _notice_title(title)):
        return NOTICE, False
    if _ENGLISH.search(stem) or (title and _latin(title)):
        return ENGLISH, corrected
    if _SUMMARY.search(stem) or re.search(r"(?:年度|季度)报告摘要", re.sub(r"\s+", "", title[:600])):
        return SUMMARY, corrected
    return FULL, corrected


def _notice_title(title: str) -> bool:
    """A title page that is a notice's: 更正公告 or 补充公告 in its first lines, no 年度报告全文 / 正文."""
    head = re.sub(r"\s+", "", title[:300])
    return bool(re.search(r"(?:更正|补充)(?:的)?公告", head)) and not re.search(r"报告(?:全文|正文)", head)


def _latin(title: str) -> bool:
    """A title page written in English: far more Latin letters than Chinese characters."""
    latin = sum(ch.isascii() and ch.isalpha() for ch in title)
    han = sum("\u4e00" <= ch <= "\u9fff" for ch in title)
    return latin > 200 and latin > 4 * han


_KIND_RANK = {FULL: 2, SUMMARY: 1, ENGLISH: 0}


def _choose(paths: list[Path], dates: dict[Path, Any], kinds: dict[Path, tuple[str, bool]],
            notes: list[str]) -> Path | None:
    """The report among ``paths`` (each with its dates and kind): never a notice; the Chinese files before the
    English ones; then the newest period (a file whose period is not known last), a full report before its
    摘要, a corrected re-release before its original, the later day, the later file. Every other file is named
    in ``notes`` with why (older periods counted once); a 摘要 or English version chosen says so."""
    for p in paths:
        if kinds[p][0] == NOTICE:
            notes.append(f"未用 {p.name}: 是公告 (更正/补充), 不是报告")
    reports = [p for p in paths if kinds[p][0] != NOTICE]
    chinese = [p for p in reports if kinds[p][0] != ENGLISH]
    for p in reports if chinese else ():
        if kinds[p][0] == ENGLISH:
            notes.append(f"未用 {p.name}: 英文版, 已有中文报告")
    pool = chinese or reports
    if not pool:
        return None

    def order(p: Path) -> tuple[Any, ...]:
        d = dates[p]
        period = d.period.order if d.period is not None else _named_year(p.name, d) or (0, 0)
        kind, corrected = kinds[p]
        return period, _KIND_RANK[kind], corrected, d.published or dt.date.min, p.stat().st_mtime, p.name

    orders = {p: order(p) for p in pool}  # each file's stat once
    chosen = max(pool, key=orders.__getitem__)
    older = 0
    for p in pool:
        if p == chosen:
            continue
        if orders[p][0] < orders[chosen][0]:
            older += 1
        elif kinds[p][0] != kinds[chosen][0]:
            notes.append(f"未用 {p.name}: {kinds[p][0]}, 已有{kinds[chosen][0]} {chosen.name}")
        elif kinds[chosen][1] and not kinds[p][1]:
            notes.append(f"未用 {p.name}: 已被修订版 {chosen.name} 取代")
        else:
            notes.append(f"未用 {p.name}: 同一报告期, 取较新的 {chosen.name}")
    if older:
        notes.append(f"未用较旧报告期的 {older} 个文件")
    if kinds[chosen][0] != FULL:
        notes.append(f"所读 {chosen.name} 是{kinds[chosen][0]}: 没有完整的中文年报")
    return chosen


def _read_texts(paths: list[Path]) -> dict[Path, str | None]:
    """Each file's text, read here one after another; ``None`` when it cannot be read (its row says why
    when it is read for the screen)."""
    out: dict[Path, str | None] = {}
    for path in paths:
        try:
            out[path] = read_document(path)
        except InputError:
            out[path] = None
    return out
