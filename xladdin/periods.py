"""A report's period (报告期) and publication date (公告日), each with where it was read.

Backtests keep the day a figure became public beside its period (Qlib's point-in-time data: ``date``
and ``period``; tushare: ``ann_date`` and ``end_date``). A report says both in several places, read
here in code, never by the model:

- a pool's 公告日期 / 报告期 columns (a date, ``20210423``, ``2021年报``, ``2021-12-31``, ``2021Q1``);
- the file name as the exchanges' sites name files (``2021-04-23__贵州茅台__2020年年度报告.pdf``;
  ``600519_2021年报.pdf`` gives the period alone);
- the report's text: its cover title (``2021年第一季度报告``) and the day its board approved it
  (``董事会批准报送日期：2022年3月30日``, ``董事会…于2021年4月23日…审议通过``, or the date under 董事长 at
  the end).

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
_BOARD = (
    (re.compile(r"董事会批准报送日期\s*[:：]?\s*" + _CN_DATE), "正文: 董事会批准报送日期"),
    (re.compile(r"董事会[^。；\n]{0,40}?于\s*" + _CN_DATE), "正文: 董事会审议日"),
    (re.compile(_CN_DATE + r"[^。；\n]{0,12}召开[^。；\n]{0,30}董事会"), "正文: 董事会审议日"),
)
_CHAIR = re.compile(r"董事长\s*[:：]?")
COVER_CHARS = 3000  # where a report's cover title stands
ENDS_CHARS = 30_000  # where its board approval is said: near its start, and at its end


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

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class ReportDates:
    """A report's period and publication date, each with its source (``None``: not known)."""

    period: Period | None = None
    period_source: str | None = None
    published: dt.date | None = None
    published_source: str | None = None

    def merged(self, other: ReportDates) -> ReportDates:
        """These dates, with what ``other`` knows where these do not (the first source wins)."""
        out = self
        if out.period is None and other.period is not None:
            out = replace(out, period=other.period, period_source=other.period_source)
        if out.published is None and other.published is not None:
            out = replace(out, published=other.published, published_source=other.published_source)
        return out

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


def from_text(text: str | None) -> ReportDates:
    """What a report's text says: its cover title's period, and the day its board approved it (a
    statement of it, else the date under 董事长 at its end)."""
    if not text:
        return ReportDates()
    period = None
    if m := _PERIOD.search(text[:COVER_CHARS]):
        period = _period_of(m)
    ends = text if len(text) <= 2 * ENDS_CHARS else text[:ENDS_CHARS] + "\n" + text[-ENDS_CHARS:]
    published, source = None, None
    for pattern, said in _BOARD:
        if m := pattern.search(ends):
            published, source = _date(*m.groups()[-3:]), said
            if published:
                break
    if published is None:
        tail = text[-3000:]
        chairs = list(_CHAIR.finditer(tail))
        if chairs and (m := re.search(_CN_DATE, tail[chairs[-1].end():][:300])):
            published, source = _date(*m.groups()), "正文: 董事长签署日"
    return ReportDates(period, "正文: 封面标题" if period else None, published, source if published else None)


def from_report(name: str | None, text: str | None) -> ReportDates:
    """A report's dates from its file name first, then its text."""
    return from_name(name).merged(from_text(text))
