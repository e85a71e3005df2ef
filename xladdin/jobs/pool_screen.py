"""Headless screening: a pool file in, an annotated report out (the screen, or results highlights)."""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..core import Batcher, Cache, Resolver, read_texts, started
from ..engine.gguf_files import STARTER_NOTE
from ..errors import XladdinError
from ..reading.documents import Reports
from ..reading.pool import NOTES_REQUIRED, REQUIRED, read_pool
from ..settings import Settings
from ..tasks.base import Task
from ..tasks.highlights import NO_ANSWER_NOTE, HighlightsResult, HighlightsTask
from ..tasks.rules import DEFAULT_RULES, Flag, Rules
from ..tasks.screen import ScreenResult, ScreenTask, date_rows, parse_as_of
from ..version import __version__
from .changes import Changes, Saved, compare_reports, read_screen, saved_from_table
from .replay import record
from .report import check_output, table, write_report


def cache_kept(cache: Cache, results: list[Any]) -> str:
    """What the cache holds of a run, as true as it can be said (a report that could not be written
    loses nothing the cache kept): the cache off or unusable, answers it could not store, or all of them."""
    answered = sum(_answered(r) for r in results)
    again = "free some space and run the same command again"
    if not cache.enabled:
        why = cache.warning or "the cache is off (--no-cache)"
        return f"no answer is in the cache ({why}): {again}, and the {answered} rows answered are asked again"
    if cache.write_failures:
        return (f"{cache.write_failures} of the model's answers could not be stored in the cache either (its disk is "
                f"full too?): {again}; those rows are asked again")
    return f"the model's answers ({answered} rows) are in the cache: {again}, they are not asked again"


def _answered(result: Any) -> bool:
    """Whether the model answered a row (from the cache or now): not an error, nor what code gave alone
    (the screen's 模型未作答, the highlights code writes from its figures)."""
    if isinstance(result, ScreenResult):
        return Flag.NO_ANSWER not in result.flags
    if isinstance(result, HighlightsResult):
        return not result.notes.startswith(NO_ANSWER_NOTE)
    return not isinstance(result, XladdinError)


@dataclass
class RunSummary:
    rows: int
    done: int
    errors: int
    cache_hits: int
    seconds: float
    output: Path
    note: str | None
    without_answer: int = 0  # rows whose model answer failed: the rules' and code's verdict, flagged 模型未作答
    unrecognised: list[str] | None = None  # columns no field was read from (kept as they are)
    changes: Changes | None = None  # what changed since the report given to ``compare``
    passed_over: list[str] | None = None  # lines of the pool read as no row (a title, notes, 合计, formulas unsaved)

    @property
    def answered(self) -> int:
        """Rows the model answered (from the cache or now)."""
        return self.done - self.without_answer

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


def open_pool(input_path: str | Path, output_path: str | Path, settings: Settings, reports: str | Path | None,
              as_of: Any, compare: str | Path | Saved | None, fields: dict[str, Any] | None = None,
              required: tuple[Any, ...] = REQUIRED) -> tuple[Any, Any, list]:
    """A pool job's start, before any row is asked: the output checked, the earlier report to compare
    with read, the pool read, its report files matched and placed (``documents.Reports``: from the pool's
    folder and ``--reports``). Returns (the earlier report or ``None``, the pool, its records)."""
    check_output(output_path, input_path)
    earlier = compare if isinstance(compare, Saved) or compare is None else read_screen(compare)  # read once
    pool = read_pool(input_path, required)
    allowed = Reports.of(settings, pool.path.parent, reports)
    if reports is not None:
        pool.match_reports(reports, as_of, texts_for(settings, allowed))
    records = [allowed.place({**r, **(fields or {})}, pool.path.parent) for r in pool.records()]
    return earlier, pool, records


def texts_for(settings: Settings, allowed: Reports) -> Any:
    """How ``--reports --as-of`` reads the files only their text dates: by reader processes, into the cache's
    store of texts (``readers.read_texts``)."""
    return read_texts(lambda: Cache(settings.cache_dir, enabled=not settings.no_cache), allowed, settings.readers,
                      settings.reader_memory_mib)


def run_facts(settings: Settings, core: Batcher, task: Task, input_path: str | Path, reports: str | Path | None,
              pool: Any, rows: int, *, note: str | None, counts: dict[str, Any], facts: dict[str, Any],
              began: dt.datetime, seconds: float) -> dict[str, Any]:
    """A pool job's Run sheet: what ran on what (and what a rerun needs), the pool as read, ``counts``
    (errors, cache hits, engine requests, rows code answered alone, report files …) and the time."""
    engine, cache = core.engine, core.cache
    return {
        "note": note,
        "model": core.learned.model_id,
        "engine": engine.describe(),
        "task": task.name,
        "task_version": task.version,
        **facts,
        "input": str(input_path),
        **record(settings, engine, task, input_path, reports, cache.directory if cache.enabled else None),
        "reports": f"{reports}: {len(pool.reports)} of {rows} rows matched" if reports else None,
        "columns_read": {name: pool.columns[i] for name, i in pool.mapping.items()},
        "columns_not_recognised": pool.unrecognised(),
        "lines_skipped": pool.skipped,  # a title above the header, notes below the table
        "rows": rows,
        **counts,
        "seconds": round(seconds, 3),
        "started": began.isoformat(timespec="seconds"),
        "xladdin": __version__,
        "cache": str(cache.directory) if cache.enabled else cache.warning or "off",
    }


def write_run(output_path: str | Path, pool: Any, results: list[Any], result_model: type[BaseModel],
              run: dict[str, Any], kept: str, earlier: Any, compare: str | Path | Saved | None
              ) -> tuple[Path, Changes | None]:
    """The report written, with what changed since ``earlier`` (a Changes sheet) when there is one."""
    changes = None
    if earlier is not None:
        run["compared_with"] = str(compare.path if isinstance(compare, Saved) else compare)
        changes = compare_reports(earlier, saved_from_table(output_path, *table(pool, results, result_model)))
        run["changes"] = changes.counts()
    return write_report(output_path, pool, results, result_model, run, kept, changes), changes


TICK_S = 1.0  # the bar's counts refreshed this often while no row is answered
LINE_S = 60.0  # without a bar (a log, --no-progress): a progress line this often


@contextlib.contextmanager
def tally(total: int, desc: str, progress: bool, bar_class: Any = None,
          more: Callable[[], dict[str, Any]] | None = None) -> Iterator[tuple[Callable[[int, Any], None], list[int]]]:
    """A progress bar over ``total`` rows (rows/s, ETA; cache hits and errors, and ``more()``'s counts,
    beside it): ``(on_result, [hits, errors])``, the callback each row's result is given to, and the counts
    it keeps."""
    from tqdm import tqdm

    counts = [0, 0]
    # a bar on a terminal (or the caller's own bar, pandas' notebook one); in a log or a mail (cron), and
    # with --no-progress, a line every LINE_S instead: a long wait (PDFs read, a model loading) never looks hung
    bar_on = progress and (bar_class is not None or sys.stderr.isatty())
    done, began, stop = [0], time.monotonic(), threading.Event()
    with (bar_class or tqdm)(total=total, unit="row", desc=desc, disable=not bar_on, dynamic_ncols=True) as bar:
        shown = [0.0]  # when the counts beside the bar were last set: at most 10 times a second

        def on_result(_: int, res: Any) -> None:
            if isinstance(res, XladdinError):
                counts[1] += 1
            elif res.provenance.cached:
                counts[0] += 1
            done[0] += 1
            if bar_on and ((now := time.monotonic()) - shown[0] >= 0.1 or bar.n + 1 >= total):
                shown[0] = now
                bar.set_postfix(cached=counts[0], errors=counts[1], **(more() if more else {}), refresh=False)
            bar.update(1)

        def tick() -> None:  # between results too: what is being read, and for how long
            while not stop.wait(TICK_S if bar_on else LINE_S):
                extra = more() if more else {}
                if bar_on:
                    bar.set_postfix(cached=counts[0], errors=counts[1], **extra)
                    continue
                seconds = time.monotonic() - began
                rate = done[0] / seconds if seconds > 0 else 0.0
                eta = f", about {(total - done[0]) / rate:.0f}s left" if rate > 0 else ""
                read = "".join(f", {n} {name} read" for name, n in extra.items())
                print(f"{desc}: {done[0]}/{total} rows{read}, {rate:.2f} rows/s after {seconds:.0f}s{eta}",
                      file=sys.stderr, flush=True)

        ticker = threading.Thread(target=tick, name="xladdin-progress", daemon=True)
        ticker.start()
        try:
            yield on_result, counts
        finally:
            stop.set()
            ticker.join(5)


def screen_records(batcher: Batcher, task: Task, records: list[Any], progress: bool,
                   bar_class: Any = None) -> tuple[list[Any], int, int]:
    """Results in input order, with a progress bar (rows, cache hits, errors, report files read,
    rows/s, ETA); returns (results, cache hits, errors)."""

    def files() -> dict[str, int]:
        snap = batcher.reader.snapshot()
        read = snap["files_read"] + snap["files_from_store"]
        return {"files": read} if read else {}

    with tally(len(records), task.name, progress, bar_class, files) as (on_result, counts):
        results = Resolver(batcher).map(task, records, on_result)
    return results, counts[0], counts[1]


def screen_file(
    input_path: str | Path,
    output_path: str | Path,
    settings: Settings,
    *,
    rules: Rules = DEFAULT_RULES,
    progress: bool = True,
    batcher: Batcher | None = None,
    reports: str | Path | None = None,
    compare: str | Path | Saved | None = None,
    as_of: Any = None,
) -> RunSummary:
    """Screen the pool at ``input_path`` into a report; ``reports``: a folder of report files matched
    to rows by the stock code in their names; ``compare``: an earlier report (or one read already), whose
    rows that changed go to the report's Changes sheet (``changes.compare_reports``); ``as_of``: a date, no
    report published after it used (``screen.date_rows``)."""
    task = ScreenTask(rules=rules, max_text_chars=settings.max_text_chars)
    return _pool_job(input_path, output_path, settings, task, ScreenResult, progress=progress, batcher=batcher,
                     reports=reports, facts=lambda _: {"rules": rules.model_dump()}, compare=compare,
                     as_of=parse_as_of(as_of), dated=True)


def highlights_file(input_path: str | Path, output_path: str | Path, settings: Settings, *,
                    points: int | None = None, max_chars: int | None = None, progress: bool = True,
                    batcher: Batcher | None = None, reports: str | Path | None = None) -> RunSummary:
    """Results highlights for every row of the pool at ``input_path`` (its report text or file), each
    number checked (``tasks.highlights``), into a report."""

    def facts(results: list[Any]) -> dict[str, Any]:
        done = [r for r in results if isinstance(r, HighlightsResult)]
        return {"highlights_kept": sum(r.kept for r in done),
                "highlights_dropped": sum(r.dropped for r in done),  # a number neither code nor the source gives
                "numbers_checked": sum(r.numbers_checked for r in done),
                "numbers_unverified": sum(r.numbers_unverified for r in done)}

    return _pool_job(input_path, output_path, settings, HighlightsTask(points), HighlightsResult,
                     progress=progress, batcher=batcher, reports=reports, fields={"max_chars": max_chars}, facts=facts,
                     required=NOTES_REQUIRED)


def _pool_job(input_path: str | Path, output_path: str | Path, settings: Settings, task: Task,
              result_model: type[BaseModel], *, progress: bool, batcher: Batcher | None,
              reports: str | Path | None, facts: Callable[[list[Any]], dict[str, Any]],
              fields: dict[str, Any] | None = None, compare: str | Path | Saved | None = None,
              as_of: dt.date | None = None, dated: bool = False, required: tuple[Any, ...] = REQUIRED) -> RunSummary:
    """A pool file through ``task`` into a report: the output checked before any row is asked, the rows
    (with ``fields`` added; ``required``: the fields the pool must have) in one batch, the run's facts
    (``facts`` of the results among them) beside; ``compare``: an earlier report (read before any row is
    asked) compared with this one; ``dated``: each row's report dated (报告期, 公告日) and, with ``as_of``,
    nothing published after that day used."""
    earlier, pool, records = open_pool(input_path, output_path, settings, reports, as_of, compare, fields, required)
    began = dt.datetime.now().astimezone()
    t0 = time.perf_counter()
    # an engine that cannot start at all is one error line, not a report of errors
    with started(settings, batcher) as core:
        # a file dated only by its text is read by the core's readers, once: its row's request finds it read
        records, dating = date_rows(pool, records, as_of, core.reader.read_now, settings.undated_reports) if dated \
            else (records, None)
        if dating is not None:
            results, hits, errors = screen_records(core, task, dating.sent(records), progress)
            results, errors = dating.finish(results), errors + len(dating.refused)
        else:
            results, hits, errors = screen_records(core, task, records, progress)
        seconds = time.perf_counter() - t0
        alone = sum(not _answered(r) for r in results if not isinstance(r, XladdinError))
        engine = core.engine
        note = STARTER_NOTE if core.learned.starter else None  # run here, or by a server named by its file
        out_of_rotation = getattr(getattr(engine, "replicas", None), "down_urls", lambda: "")()
        if out_of_rotation and len(getattr(engine, "urls", ())) > 1:  # said where the run is summed up
            taken = f"servers taken out of the rotation, their rows sent to the others: {out_of_rotation}"
            note = f"{note}; {taken}" if note else taken
        snap = core.snapshot()
        counts = {"errors": errors, "cache_hits": hits, "engine_requests": snap["engine_requests"],
                  "without_answer": alone,  # rows the rules and code answered alone
                  "results_recalled": snap["recalled"],  # report rows whose result was kept by their input
                  "cache_damaged": core.cache.damaged,  # entries that did not open: made again
                  # report files parsed in this run, and found already read in the cache (no file opened)
                  **{name: n for name, n in core.reader.snapshot().items() if name != "files_reading"}}
        run = run_facts(settings, core, task, input_path, reports, pool, len(records), note=note, counts=counts,
                        facts={**facts(results), **(dating.facts() if dating is not None else {})}, began=began,
                        seconds=seconds)
        out, changes = write_run(output_path, pool, results, result_model, run, cache_kept(core.cache, results),
                                 earlier, compare)
    if snap["timed_out"]:  # what to do about it, said where the run is summed up
        timeout = settings.options_for(engine.kind).timeout
        why = (f"{out_of_rotation}: check it, or raise --timeout (XLADDIN_TIMEOUT)" if out_of_rotation else
               "a slow or busy CPU: raise --timeout (XLADDIN_TIMEOUT), or lower --parallel")
        hint = (f"{snap['timed_out']} of {len(records)} rows timed out: the engine made no progress for "
                f"{timeout:g}s — {why}")
        note = f"{note}; {hint}" if note else hint
    if core.cache.damaged:
        damaged = f"{core.cache.damaged} damaged cache entries did not open: their rows were made again"
        note = f"{note}; {damaged}" if note else damaged
    return RunSummary(len(records), len(records) - errors, errors, hits, seconds, out, note, alone,
                      pool.unrecognised(), changes, pool.skipped)
