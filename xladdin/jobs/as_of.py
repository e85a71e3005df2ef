"""Screening as of a date: no row uses what was not public on that day.

Each row's report has a period and a publication date (``periods``: the pool's 公告日期 / 报告期 columns,
the file's name, its text; of the days they give, the latest the period makes possible). Under
``as_of``:

- a row whose own 公告日期 is after the date is refused (its figures were not public then): that row's
  error, naming both days;
- a report (file or text) is used only when it was public by then: one published after the date, one
  whose period ends after it, and one whose publication day is not known are left out, and the row is
  screened on the pool's own fields, saying which report was left out and why (so are the files
  ``--reports`` passed over). With ``undated_reports`` (``--undated-reports``) a report of no known
  day is used and its row flagged 公告日未知;
- the pool's own typed fields are what the user knew that day: no flag for them.

Every front door that screens a table (the CLI, ``xladdin.screen(df)``, a workbook's ``QWEN_SCREEN`` cells
and Refresh macro, as of the ``as_of`` setting) runs ``date_rows`` on its placed records before the run
and ``Dating.finish`` (a cell: ``Dating.result`` of each row) on the results: the result columns 报告期
and 公告日 and, under ``as_of``, where each was read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import periods
from ..errors import InputError, XladdinError
from ..reading.documents import FIELD, read_document
from ..reading.figures import report_dates
from ..reading.pool import Pool
from ..tasks.rules import Flag
from ..tasks.screen import ScreenResult


def parse_as_of(value: Any) -> dt.date | None:
    """``--as-of`` / ``as_of=``: a date (``2021-03-31``, ``20210331``, a ``date``), or ``None``."""
    try:
        return periods.as_of_day(value)
    except ValueError as e:
        raise InputError("as_of", str(e)) from None


@dataclass
class Dating:
    """What ``date_rows`` found for each row: its report's dates, notes, and the rows refused."""

    as_of: dt.date | None
    dates: list[periods.ReportDates] = field(default_factory=list)
    notes: list[list[str]] = field(default_factory=list)
    undated: list[bool] = field(default_factory=list)
    refused: dict[int, InputError] = field(default_factory=dict)
    left_out_undated: int = 0  # reports not used because their day is not known

    def sent(self, records: list[Any]) -> list[Any]:
        """The records to screen: all but the refused."""
        return [r for i, r in enumerate(records) if i not in self.refused]

    def finish(self, results: list[Any]) -> list[Any]:
        """The results of ``sent`` records back in the pool's rows (a refused row is its error), each
        screen verdict with its report's 报告期 and 公告日 (the pool's own columns first), and under
        ``as_of`` where they were read, the reports left out, and 公告日未知."""
        given = iter(results)
        return [self.result(i, None if i in self.refused else next(given)) for i in range(len(self.dates))]

    def result(self, i: int, res: Any) -> Any:
        """Row ``i``'s result as ``finish`` gives it: its error if it was refused, else ``res`` dated."""
        if i in self.refused:
            return self.refused[i]
        return self._dated(res, i) if isinstance(res, ScreenResult) else res

    def _dated(self, res: ScreenResult, i: int) -> ScreenResult:
        dates = self.dates[i]
        update: dict[str, Any] = {}
        if dates.period is not None:
            update["period"] = dates.period.label
        if dates.published is not None:
            update["published"] = dates.published.isoformat()
        if self.as_of is not None:
            said = [*self.notes[i], *([dates.sources()] if dates.sources() else [])]
            if said:
                update["notes"] = "; ".join([*said, *([res.notes] if res.notes else [])])
            if self.undated[i]:
                update["flags"] = [f for f in Flag if f in {*res.flags, Flag.UNDATED}]
        return res.model_copy(update=update) if update else res

    def facts(self) -> dict[str, Any]:
        """For the Run sheet."""
        return {"as_of": self.as_of.isoformat() if self.as_of else None,
                "refused_as_of": len(self.refused),
                "reports_left_out": sum(1 for n in self.notes if any(s.startswith("未用") for s in n)),
                "reports_left_out_undated": self.left_out_undated,
                "undated_used": sum(self.undated)}


def date_rows(pool: Pool, records: list[Any], as_of: dt.date | None,
              read: Callable[[Any], str] | None = None, undated: bool = False) -> tuple[list[Any], Dating]:
    """The placed ``records`` of ``pool`` as of ``as_of`` (``None``: as they are), and what was found
    (``Dating``). Under ``as_of`` a file's text is read for its dates (by ``read``, default
    ``read_document``; the cells: their runtime's reader), so that a later day its text gives wins over
    its name's. ``undated``: a report of no known day is used (flagged) instead of left out."""
    dating = Dating(as_of)
    out = []
    for i, (rec, own) in enumerate(zip(records, pool.report_dates(), strict=True)):
        notes = list(pool.left_out.get(i, ()))
        path = rec.get(FIELD) if isinstance(rec, dict) else None
        text = rec.get("report_text") if isinstance(rec, dict) else None
        has_text = isinstance(text, str) and bool(text.strip())
        found = [periods.from_name(Path(path).name if path else None)]
        if has_text:
            found.append(report_dates(text))
        if as_of is not None and path:
            try:
                found.append(report_dates((read or read_document)(path)))
            except XladdinError:
                pass  # the row's own reading says why
        dates = own.combined(*found)
        flagged = False
        if as_of is not None:
            raw = pool.published_cell(i)
            if own.published is None and raw not in (None, "") and not (isinstance(raw, float) and raw != raw):
                dating.refused[i] = InputError("published", f"公告日期 {raw!r} is not a date: this row cannot be "
                                               f"screened as of {as_of}")
            elif own.published is not None and own.published > as_of:
                dating.refused[i] = InputError(
                    "published", f"公告日期 {own.published} is after the as-of day {as_of}: this row's figures were "
                    "not public then (refused)")
            elif path or has_text:
                why = dates.not_public(as_of, undated)
                if why is not None:
                    name = Path(path).name if path else "财报摘要"
                    notes.append(f"未用 {name}: {why}")
                    dating.left_out_undated += why.startswith(periods.UNKNOWN_DAY)
                    rec = {**rec, FIELD: None, "report_text": None}
                    dates = own
                else:
                    flagged = dates.published is None
                    if dates.conflict:
                        notes.append(dates.conflict)
        dating.dates.append(dates)
        dating.notes.append(notes)
        dating.undated.append(flagged)
        out.append(rec)
    return out, dating

