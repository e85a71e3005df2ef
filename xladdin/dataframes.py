"""The pandas front door: ``xladdin.screen(df)`` returns ``df`` with the verdict columns beside it.

The same path as the CLI and Excel: headers recognised as ``xladdin screen`` does (代码, 名称,
ROE, 市盈率TTM, 财报摘要 …, a unit in brackets converts), one batch, answers from the cache
first, a progress bar that renders in a notebook, and a bad row is that row's error text in the
``错误 error`` column, never an exception.
"""

from __future__ import annotations

from typing import Any

from .batcher import Batcher, started
from .pool import pool_from_frame
from .pool_screen import screen_records
from .report import verdict_table
from .rules import DEFAULT_RULES, Rules
from .settings import Settings
from .tasks.screen import ScreenResult, ScreenTask


def screen(df: Any, *, rules: Rules = DEFAULT_RULES, settings: Settings | None = None, progress: bool = True,
           batcher: Batcher | None = None) -> Any:
    """A copy of the DataFrame ``df`` with the screen's verdict columns (risk level, score, reason,
    flags, figures, evidence, notes, provenance, error) added on the right, index kept."""
    import pandas as pd
    from tqdm.auto import tqdm

    settings = settings or Settings.load()
    pool = pool_from_frame(df)
    task = ScreenTask(rules=rules, max_text_chars=settings.max_text_chars)
    with started(settings, batcher) as core:
        results, _, _ = screen_records(core, task, pool.records(), progress, bar_class=tqdm)
    heads, rows = verdict_table(results, ScreenResult)
    verdict = pd.DataFrame(rows, columns=heads, index=df.index)
    clash = [h for h in heads if h in df.columns]
    if clash:  # screening a frame that already holds a verdict: the new one replaces it
        df = df.drop(columns=clash)
    return pd.concat([df, verdict], axis=1)
