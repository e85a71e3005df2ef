"""A report's period (报告期) and publication date (公告日), each with where it was read.

Backtests keep the day a figure became public beside its period (Qlib's point-in-time data: ``date``
and ``period``; tushare: ``ann_date`` and ``end_date``). A report says both in several places, read
here in code, never by the model:

- a pool's 公告日期 / 报告期 columns (a date, ``20210423``, ``2021年报``, ``2021-12-31``, ``2021Q1``);
- the file name as the exchanges' sites name files (``2021-04-23__贵州茅台__2020年年度报告.pdf``;
  ``600519_2021年报.pdf`` gives the period alone);
- the report's text: its cover title (``2021年第一季度报告``) and its own statement of its disclosure
  (``内部控制评价报告全文披露日期``, released with the report; a cover date beside its 公告编号).

Those are the day a report became public. Its approval for release (``董事会批准报送日期：2022年3月30日``,
``本年度报告于2022年3月29日由…董事会…审议通过``, ``本财务报表业经…董事会于…批准报出``, the date under 董事长
at its end) and its auditor's report's date are only the earliest it can have been public (``lower``): a
report dated by them alone is taken as public from the statutory deadline of its period (annual reports
4-30 of the next year, half-year 8-31, Q1 4-30, Q3 10-31; ``DEADLINES``), or from the bound itself when it
is later, and its 公告日 says so. Never a date from another sentence.

A day before its period ends (or years after it) is impossible and not used; where sources disagree
the latest is kept and the others named (``ReportDates.combined``).

A period without its year in the name (``…__年度报告.pdf``) is taken from the publication date: an
annual report comes out in the year after its period, the quarterly and half-year reports in theirs.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, replace
from typing import Any

# kind → (its words, most specific first; the label after the year; months the period ends)
KINDS: dict[str, tuple[str, str, int]] = {
    "Q1": (r"第一季度报告|一季度报告|第一季度|一季度|一季报|q1", "一季度", 3),
    "H1": (r"半年度报告|半年度|半年报|中期报告|中报|h1", "半年度", 6),
    "Q3": (r"第三季度报告|三季度报告|第三季度|三季度|三季报|q3", "三季度", 9),
    "A": (r"年度报告|年报|年度|annual", "年度", 12),
}
_KIND_WORDS = "|".join(f"(?P<{k}>{words})" for k, (words, _, _) in KINDS.items())
_YEAR = r"(?<!\d)(?P<year>(?:19|20)\d\d)(?!\d)"
_PERIOD = re.compile(_YEAR + r"\s*(?:年\s*)?(?:" + _KIND_WORDS + ")", re.IGNORECASE)
_KIND_ALONE = re.compile(_KIND_WORDS, re.IGNORECASE)
_END_DATE = re.compile(r"^\s*((?:19|20)\d\d)[-/.年]?\s*(\d{1,2})[-/.月]?\s*(\d{1,2})日?\s*$")
_YEAR_ONLY = re.compile(r"^\s*((?:19|20)\d\d)\s*年?\s*$")
_NAME_DATE = re.compile(r"(?<!\d)((?:19|20)\d\d)[-_.]?(0[1-9]|1[0-2])[-_.]?(0[1-9]|[12]\d|3[01])(?!\d)")
_CN_DATE = r"((?:19|20)\d\d)\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*日"
_HAN = "一二三四五六七八九十"
_HAN_DIGITS = {c: i for i, c in enumerate("〇一二三四五六七八九")} | {"○": 0, "零": 0, "O": 0, "０": 0, "0": 0}
_HAN_DATE = r"(二[〇○零O０0一二三四五六七八九]{3})\s*年\s*([" + _HAN + r"]{1,3})\s*月\s*([" + _HAN + r"]{1,4})\s*日"
_ANY_DATE = re.compile(_CN_DATE + "|" + _HAN_DATE)
# The report's own statements of the day it was approved for release, most specific first. Each is the
# sentence that names the report (本报告 / 本年度报告, never 本报告期) or its statements and says it was
# approved; a date in any other sentence (a permit, a board vote on something else, a standard's start)
# is never a publication day.
_SENTENCE = r"[^。；;\n]"
_APPROVED = (
    (re.compile(r"董事会批准报送日期\s*[:：]?\s*" + _CN_DATE), "正文: 董事会批准报送日期"),
    (re.compile(r"本(?:年度|季度|半年度)?报告(?!期)(?:全文)?(?:及其?摘要)?" + _SENTENCE + r"{0,60}?"
                r"(?:于|在)\s*" + _CN_DATE + _SENTENCE + r"{0,60}?(?:审议通过|批准)"), "正文: 董事会审议日"),
    (re.compile(_CN_DATE + _SENTENCE + r"{0,12}召开" + _SENTENCE + r"{0,40}董事会" + _SENTENCE + r"{0,60}?"
                r"审议通过(?:了)?本(?:年度|季度|半年度)?报告(?!期)"), "正文: 董事会审议日"),
    (re.compile(r"董事会" + _SENTENCE + r"{0,30}?于\s*" + _CN_DATE + _SENTENCE + r"{0,30}?审议通过(?:了)?"
                r"本(?:年度|季度|半年度)?报告(?!期)"), "正文: 董事会审议日"),
    (re.compile(r"财务报(?:表|告)" + _SENTENCE + r"{0,30}?于\s*" + _CN_DATE + _SENTENCE + r"{0,20}?批准报出"),
     "正文: 财务报表批准报出日"),
)
# the auditor's report's date: stated (the SZSE template's 审计报告签署日期), else the date beside its
# signature (中国注册会计师, not the 中国注册会计师审计准则 its text cites)
_AUDIT_SIGNED = re.compile(r"审计报告签署日期\s*[:：]?\s*" + _CN_DATE)
_AUDITOR = re.compile(r"中国注册会计师(?!\s*(?:审计|执业|职业|独立|准则))")
AUDIT_DATE_BEFORE = 150  # the date beside the signature: this far before it (some print it above)
AUDIT_DATE_CHARS = 400  # how far after the auditor's signature its date stands
_BARE_DATE = re.compile(r"(?<![\d,.])((?:19|20)\d\d)[ \t]+(\d{1,2})[ \t]+(\d{1,2})(?![\d,.%])")
_CHAIR = re.compile(r"董事长\s*[:：]")
# the report's own statements of the day it became public: the 内部控制评价报告 is disclosed with it
_DISCLOSED = re.compile(r"内部控制评价报告全文披露日期\s*[:：]?\s*" + _CN_DATE)
_NOTICE_NO = re.compile(r"公告编号")
NOTICE_DATE_CHARS = 200  # a cover's date stands this close to its 公告编号
PAGE_BREAK = "\f"
# the statutory deadline of each kind of report: (months after the period's end's year, month, day)
DEADLINES: dict[str, tuple[int, int, int]] = {"A": (1, 4, 30), "H1": (0, 8, 31), "Q1": (0, 4, 30), "Q3": (0, 10, 31)}
LATEST_AFTER_END = 730  # a publication day after this many days from its period's end is no publication day
COVER_CHARS = 3000  # where a report's cover title stands
UNKNOWN_DAY = "公告日未知"


@dataclass(frozen=True, order=True)
class Period:
    year: int
    kind: str  # Q1, H1, Q3 or A

    @property
    def label(self) -> str:
        return f"{self.year}{KINDS[self.kind][1]}"

    @property
    def order(self) -> tuple[int, int]:
        return self.year, KINDS[self.kind][2]

    @property
    def end(self) -> dt.date:
        """The period's last day."""
        month = KINDS[self.kind][2]
        return dt.date(self.year, month, 31 if month in (3, 12) else 30)

    @property
    def deadline(self) -> dt.date:
        """The last day its report may be published (``DEADLINES``): public by then for certain."""
        years, month, day = DEADLINES[self.kind]
        return dt.date(self.year + years, month, day)

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class ReportDates:
    """A report's period and publication date, each with its source (``None``: not known)."""

    period: Period | None = None
    period_source: str | None = None
    published: dt.date | None = None
    published_source: str | None = None
    conflict: str | None = None  # sources that gave other days (the latest is kept)
    lower: bool = False  # ``published`` is only the earliest day it can have been public (an approval, a signature)
    unknown: str | None = None  # why no day is known though a lower bound is (its period is not)

    def combined(self, *others: ReportDates) -> ReportDates:
        """These dates with ``others``': the first period known; of the publication days the period makes
        possible, the latest (a report is public no earlier than any source says), the others named in
        ``conflict``. When that latest day is only a lower bound (an approval, a signature; a stated day before it
        does not make it certain), the day is its period's statutory deadline, or the bound when later; with no
        period, none."""
        out = self
        for other in others:
            if out.period is None and other.period is not None:
                out = replace(out, period=other.period, period_source=other.period_source)
        days = [(d.published, d.published_source, d.lower) for d in (self, *others)
                if d.published is not None and possible(d.published, out.period)]
        if not days:
            return replace(out, published=None, published_source=None, conflict=None, lower=False, unknown=None)
        day, source, lower = max(days, key=lambda d: (d[0], not d[2]))  # the latest; at a tie, a stated day
        other = sorted({f"{d.isoformat()} ({s})" for d, s, _ in days if d != day})
        out = replace(out, published=day, published_source=source, lower=False, unknown=None,
                      conflict=f"公告日来源不一, 取最晚: {'; '.join(other)}" if other else None)
        if not lower:  # the latest is a stated day
            return out
        # the latest is a lower bound (a stated day before it contradicts it: no day is certain either way)
        if out.period is None:
            return replace(out, published=None, published_source=None,
                           unknown=f"只知公告日不早于 {day} ({source}), 报告期未知, 无法定披露期限可用")
        deadline = out.period.deadline
        if deadline > day:
            return replace(out, published=deadline,
                           published_source=f"法定披露期限; {source} {day} 只是下限")
        return replace(out, published_source=f"{source}, 晚于法定披露期限 {deadline}")

    def not_public(self, as_of: dt.date, undated: bool = False) -> str | None:
        """Why a report of these dates was not public on ``as_of`` (``None``: it was; with ``undated``, a
        report of no known day counts as public): its period had not ended, its day is not known
        (the reason starts with ``UNKNOWN_DAY``), or it was published after."""
        if self.period is not None and self.period.end >= as_of:
            return f"报告期 {self.period.label} ({self.period_source}) 到 as-of {as_of} 尚未结束"
        if self.published is None:
            said = self.unknown or "文件名、正文均未载明"
            return None if undated else f"{UNKNOWN_DAY} ({said}; --undated-reports 可照用)"
        if self.published > as_of:
            return f"公告日 {self.published} ({self.published_source}) 晚于 as-of {as_of}"
        return None

    def sources(self) -> str:
        """``报告期 2020年度 (文件名); 公告日 2021-04-23 (文件名)`` for what is known."""
        parts = []
        if self.period is not None:
            parts.append(f"报告期 {self.period.label} ({self.period_source})")
        if self.published is not None:
            parts.append(f"公告日 {self.published.isoformat()} ({self.published_source})")
        return "; ".join(parts)

    @property
    def newest(self) -> tuple[dt.date, tuple[int, int]]:
        """What 'newest' compares: the publication day, then the period."""
        return self.published or dt.date.min, self.period.order if self.period else (0, 0)


def _date(year: str | int, month: str | int, day: str | int) -> dt.date | None:
    try:
        return dt.date(int(year), int(month), int(day))
    except ValueError:
        return None


def parse_date(value: Any) -> dt.date | None:
    """A date as a cell holds it: a date or datetime, ``2021-04-23``, ``2021/4/23``, ``2021年4月23日``,
    ``20210423`` (text or number); else ``None``."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return None
    text = value.strip().split(" ")[0].split("T")[0]
    m = _END_DATE.match(text)
    return _date(*m.groups()) if m else None


def as_of_day(value: Any) -> dt.date | None:
    """An as-of day (``--as-of``, ``as_of=``, the ``as_of`` setting): a date as ``parse_date`` reads it, or
    ``None`` for none given; anything else is a ``ValueError`` saying how to write it."""
    if value is None or value == "":
        return None
    day = parse_date(value)
    if day is None:
        raise ValueError(f"{value!r} is not a date (write it as 2021-03-31)")
    return day


def parse_period(value: Any) -> Period | None:
    """A 报告期 as a cell holds it: ``2021年报``, ``2021年第一季度报告``, ``2021Q3``, ``2021中报``, the period's
    last day (``2021-06-30``, ``20211231``), or a year alone (an annual report)."""
    if value is None:
        return None
    if isinstance(value, dt.date | int | float) and not isinstance(value, bool):
        end = parse_date(value)
        return _period_ending(end) if end else None
    text = str(value).strip()
    if m := _YEAR_ONLY.match(text):
        return Period(int(m.group(1)), "A")
    if m := _PERIOD.search(text):
        return _period_of(m)
    end = parse_date(text)
    return _period_ending(end) if end else None


def _period_ending(day: dt.date) -> Period | None:
    kind = {(3, 31): "Q1", (6, 30): "H1", (9, 30): "Q3", (12, 31): "A"}.get((day.month, day.day))
    return Period(day.year, kind) if kind else None


def _period_of(m: re.Match[str]) -> Period:
    kind = next(k for k in KINDS if m.group(k))
    return Period(int(m.group("year")), kind)


def from_cells(period: Any, published: Any, period_column: str = "报告期", published_column: str = "公告日期"
               ) -> ReportDates:
    """A pool row's own 报告期 / 公告日期 cells."""
    got_period, got_published = parse_period(period), parse_date(published)
    return ReportDates(got_period, f"列 {period_column}" if got_period else None,
                       got_published, f"列 {published_column}" if got_published else None)


def from_name(name: str | None) -> ReportDates:
    """What a report file's name says: a publication date (``2021-04-23__…``) and a period (``2020年年度报告``,
    ``600519_2021年报``; a kind without its year takes its year from the publication date)."""
    if not name:
        return ReportDates()
    stem = name.rsplit(".", 1)[0]
    published = None
    if m := _NAME_DATE.search(stem):
        published = _date(*m.groups())
    rest = _NAME_DATE.sub(" ", stem)
    period, source = None, None
    if m := _PERIOD.search(rest):
        period, source = _period_of(m), "文件名"
    elif published is not None and (k := _KIND_ALONE.search(rest)):
        kind = next(k2 for k2 in KINDS if k.group(k2))
        period = Period(published.year - 1 if kind == "A" else published.year, kind)
        source = "文件名: 由公告日推断"
    return ReportDates(period, source, published, "文件名" if published else None)


def _han_number(text: str) -> int:
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (_HAN_DIGITS.get(tens, 1) if tens else 1) * 10 + (_HAN_DIGITS[ones] if ones else 0)
    return int("".join(str(_HAN_DIGITS[c]) for c in text))


def _any_date(m: re.Match[str]) -> dt.date | None:
    """A date written in Arabic digits (``2020 年 4 月 2 日``) or in Chinese ones (``二〇二〇年一月二十二日``)."""
    if m.group(1):
        return _date(m.group(1), m.group(2), m.group(3))
    try:
        return _date(_han_number(m.group(4)), _han_number(m.group(5)), _han_number(m.group(6)))
    except (KeyError, ValueError):
        return None


def possible(day: dt.date, period: Period | None) -> bool:
    """Whether ``day`` can be the publication day of a report of ``period``: after the period's end, and
    not years after it (a date of a later event); any day when the period is not known."""
    if period is None:
        return True
    end = period.end
    return end < day <= end + dt.timedelta(days=LATEST_AFTER_END)


def text_days(text: str, period: Period | None = None) -> list[tuple[dt.date, str]]:
    """The days a report's text gives for its own release, most trusted first, each with its source: its
    statements that it was approved (``董事会批准报送日期``, ``本年度报告于…经董事会审议通过``, ``财务报表业经
    董事会于…批准报出``), the date under 董事长 at its end; else its auditor's report's date, the earliest it
    can have been public. A day the period makes impossible is left out."""
    found: list[tuple[dt.date, str]] = []
    for pattern, said in _APPROVED:
        for m in pattern.finditer(text):
            day = _date(*m.groups()[-3:])
            if day and possible(day, period):
                found.append((day, said))
                break
    tail = text[-3000:]
    chairs = list(_CHAIR.finditer(tail))
    if chairs and (m := _ANY_DATE.search(tail[chairs[-1].end():][:300])):
        day = _any_date(m)
        if day and possible(day, period):
            found.append((day, "正文: 董事长签署日"))
    if not found:
        found = _audit_day(text, period)
    return found


def _audit_day(text: str, period: Period | None) -> list[tuple[dt.date, str]]:
    for m in _AUDIT_SIGNED.finditer(text):
        day = _date(*m.groups())
        if day and possible(day, period):
            return [(day, "正文: 审计报告签署日期 (公告日不早于此)")]
    for sign in _AUDITOR.finditer(text):
        lo, hi = max(0, sign.start() - AUDIT_DATE_BEFORE), sign.end() + AUDIT_DATE_CHARS
        for m in _ANY_DATE.finditer(text, lo, hi):
            day = _any_date(m)
            if day and possible(day, period):
                return [(day, "正文: 审计报告日 (公告日不早于此)")]
    for sign in _AUDITOR.finditer(text):  # a text layer that lost 年 月 日 (``2004 3 26`` under the signatures)
        for m in _BARE_DATE.finditer(text, sign.end(), sign.end() + AUDIT_DATE_CHARS):
            day = _date(*m.groups())
            if day and possible(day, period):
                return [(day, "正文: 审计报告日 (公告日不早于此)")]
    return []


def disclosed_day(text: str, period: Period | None = None) -> tuple[dt.date, str] | None:
    """The day a report's text says it was disclosed: its 内部控制评价报告全文披露日期 (released with it), or a
    date on its first page beside its 公告编号; ``None`` when it says neither."""
    for m in _DISCLOSED.finditer(text):
        day = _date(*m.groups())
        if day and possible(day, period):
            return day, "正文: 内部控制评价报告全文披露日期"
    first = text.split(PAGE_BREAK, 1)[0][:COVER_CHARS]
    for notice in _NOTICE_NO.finditer(first):
        lo, hi = max(0, notice.start() - NOTICE_DATE_CHARS), notice.end() + NOTICE_DATE_CHARS
        for m in _ANY_DATE.finditer(first, lo, hi):
            line_start = first.rfind("\n", 0, m.start()) + 1
            line_end = first.find("\n", m.end())
            line = first[line_start : line_end if line_end >= 0 else len(first)]
            if line.strip() != m.group(0).strip():  # a cover's date stands alone on its line; one inside a
                continue  # sentence (a board meeting's) is no day of disclosure
            day = _any_date(m)
            if day and possible(day, period):
                return day, "正文: 公告编号旁的日期"
    return None


def from_text(text: str | None) -> ReportDates:
    """What a report's text says: its cover title's period, and the day it was disclosed (``disclosed_day``),
    else the latest day ``text_days`` gives, a lower bound only (``lower``)."""
    if not text:
        return ReportDates()
    period = None
    if m := _PERIOD.search(text[:COVER_CHARS]):
        period = _period_of(m)
    source = "正文: 封面标题" if period else None
    if (stated := disclosed_day(text, period)) is not None:
        return ReportDates(period, source, *stated)
    days = text_days(text, period)
    if not days:
        return ReportDates(period, source)
    day, said = max(days, key=lambda d: d[0])
    return ReportDates(period, source, day, said, lower=True)
