"""The pandas front door: ``xladdin.screen(df)`` returns ``df`` with the verdict columns beside it;
``xladdin.compare(result_df, by="行业")`` compares the figures read, industry by industry.

The same path as the CLI and Excel: headers recognised as ``xladdin screen`` does (代码, 名称,
ROE, 市盈率TTM, 财报摘要 …, a unit in brackets converts), one batch, answers from the cache
first, a progress bar that renders in a notebook, and a bad row is that row's error text in the
``错误 error`` column, never an exception.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..core import Batcher, started
from ..errors import InputError
from ..reading.documents import Reports, read_document
from ..reading.pool import NOTES_REQUIRED, REQUIRED, Pool, pool_from_frame
from ..settings import Settings
from ..tasks.base import Task
from ..tasks.highlights import HighlightsResult, HighlightsTask
from ..tasks.rules import DEFAULT_RULES, Rules
from ..tasks.screen import Dating, ScreenResult, ScreenTask, date_rows, parse_as_of
from . import compare as comparing
from .pool_screen import screen_records, texts_for
from .report import ERROR_HEADER, verdict_table


def screen(df: Any, *, rules: Rules = DEFAULT_RULES, settings: Settings | None = None, progress: bool = True,
           batcher: Batcher | None = None, reports: str | Path | None = None, as_of: Any = None) -> Any:
    """A copy of the DataFrame ``df`` with the screen's verdict columns (risk level, score, reason,
    flags, figures, evidence, notes, 报告期, 公告日, provenance, error) added on the right, index kept.
    ``reports``: a folder of report files matched to rows by the stock code in their names (``--reports``);
    ``as_of``: a date (``"2021-03-31"``): no report published after it is used (``--as-of``)."""
    settings = settings or Settings.load()
    task = ScreenTask(rules=rules, max_text_chars=settings.max_text_chars)
    day = parse_as_of(as_of)
    pool, records = _pool_records(df, settings, reports, day)
    records, dating = date_rows(pool, records, day, read_document, settings.undated_reports)
    return _beside(df, task, ScreenResult, records, settings, progress, batcher, dating)


def highlights(df: Any, *, points: int | None = None, max_chars: int | None = None,
               settings: Settings | None = None, progress: bool = True, batcher: Batcher | None = None,
               reports: str | Path | None = None) -> Any:
    """``df`` with numbered results highlights of each row's report (财报摘要 / 报告文件) beside it, every number
    checked (``xladdin highlights``'s columns: highlights, kept, dropped, notes, evidence, …)."""
    settings = settings or Settings.load()
    _, records = _pool_records(df, settings, reports, required=NOTES_REQUIRED)
    records = [{**r, "max_chars": max_chars} for r in records]
    return _beside(df, HighlightsTask(points), HighlightsResult, records, settings, progress, batcher)


def _pool_records(df: Any, settings: Settings, reports: str | Path | None,
                  as_of: dt.date | None = None, required: tuple[Any, ...] = REQUIRED) -> tuple[Pool, list[Any]]:
    """The frame's rows as task input; report files (a relative path from the current folder) are read
    from the current folder, ``reports`` and ``report_dirs``."""
    pool = pool_from_frame(df, required=required)
    here = Path.cwd()
    allowed = Reports.of(settings, here, reports)
    if reports is not None:
        pool.match_reports(reports, as_of, texts_for(settings, allowed))
    return pool, [allowed.place(r, here) for r in pool.records()]


def _beside(df: Any, task: Task, result_model: type[BaseModel], records: list[Any], settings: Settings,
            progress: bool, batcher: Batcher | None, dating: Dating | None = None) -> Any:
    """``df`` with ``task``'s result columns for ``records`` (its rows) on the right, index kept;
    ``dating``: the rows as of a date (``screen.date_rows``)."""
    import pandas as pd
    from tqdm.auto import tqdm

    with started(settings, batcher) as core:
        sent = dating.sent(records) if dating is not None else records
        results, _, _ = screen_records(core, task, sent, progress, bar_class=tqdm)
    if dating is not None:
        results = dating.finish(results)
    heads, rows = verdict_table(results, result_model)
    # a frame that already holds these columns (screened before): the new ones replace them
    return pd.concat([df.drop(columns=[h for h in heads if h in df.columns]),
                      pd.DataFrame(rows, columns=heads, index=df.index)], axis=1)


def compare(result_df: Any, by: str = "行业") -> Any:
    """The industries of a screened frame (``screen(df)``'s result) compared: a tidy DataFrame with a row per
    industry, figure and period (``2019年度``; ``本期``/``上期`` where the report's period is not known:
    count, median, min, max), the numbers of the report's Summary sheet (``compare.by_period`` lays them
    out a column per period). Rows that are errors are left out; a figure read for two years gives a
    row per year."""
    import pandas as pd

    if by not in result_df.columns:
        raise InputError(by, f"no such column to compare by; the frame has {', '.join(map(str, result_df.columns))}")
    titles = {field: ScreenResult.model_fields[field].title for field in comparing.COMPARED}
    missing = [t for t in titles.values() if t not in result_df.columns]
    if missing:
        raise InputError("result_df", f"not a screened frame (xladdin.screen(df)): no column {missing[0]}")
    errors = result_df[ERROR_HEADER] if ERROR_HEADER in result_df.columns else [None] * len(result_df)
    rows = []
    for (_, row), error in zip(result_df.iterrows(), errors, strict=True):
        if isinstance(error, str) and error:
            continue
        rows.append((row[by], row.get(PERIOD), {field: _number(row[title]) for field, title in titles.items()}))
    return pd.DataFrame(comparing.figure_table(rows), columns=comparing.HEADER)


PERIOD = ScreenResult.model_fields["period"].title


def _number(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
