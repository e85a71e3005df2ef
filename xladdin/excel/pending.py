"""Pending-cell batching: what the UDFs share.

Desktop Excel calls a UDF once per cell. xlwings' ``async_mode="threading"``
parks every pending call on a thread of a pool of min(32, cores+4) threads, so
a sheet of 500 rows reaches the model in batches of at most that size. We do
not park threads:

1. A UDF call parses its row and asks the process-wide batcher. A cached
   answer is returned at once, synchronously — no placeholder, no thread.
2. A miss is submitted to the batcher (non-blocking: the request joins the
   engine queue, or shares a request already in flight) and the cell returns a
   placeholder of the same shape as its result (``#QWEN… pending``).
3. When every request of that cell is answered (each answer goes to the
   cache the moment it arrives), the cell is recalculated through
   ``rewrite(caller)`` — on Windows ``xladdin.excel.com``, which rewrites the
   cell's formula on xlwings' COM loop with its retry on a busy Excel. The UDF
   runs again, now a pure cache hit.

So 500 filled-down rows become one queue that the batcher feeds to the
engine at its full parallelism, however few threads Excel has. Outside Excel
(``caller`` is None, e.g. tests, scripts, or no COM) a call waits for its
answers instead, up to the request timeout.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ..batcher import Batcher
from ..errors import XladdinError
from ..settings import Settings
from ..tasks.base import Task
from .cells import PENDING, error_row, filler_row

log = logging.getLogger(__name__)
Rewrite = Callable[[Any], None]


def caller_key(caller: Any) -> Hashable:
    try:
        return (caller.sheet.book.name, caller.sheet.name, caller.address)
    except Exception:
        return id(caller)


class CellRuntime:
    """One batcher for all cells of the process, and the cells waiting on it."""

    def __init__(self, settings: Settings | None = None, *, batcher: Batcher | None = None,
                 rewrite: Rewrite | None = None):  # fmt: skip
        self._settings = settings
        self._batcher = batcher
        self.rewrite = rewrite
        self._lock = threading.Lock()
        self._pending: dict[Hashable, int] = {}
        self.rewrites = 0
        self.last_error: str | None = None

    @property
    def batcher(self) -> Batcher:
        with self._lock:
            if self._batcher is None:
                self._settings = settings = self._settings or Settings.load()
                batcher = Batcher.from_settings(settings)
                try:
                    batcher.start()  # a failure is raised to the cell and tried again next call
                except BaseException:
                    batcher.close()
                    raise
                self._batcher = batcher
            return self._batcher

    @functools.cached_property
    def max_text_chars(self) -> int:
        self.batcher  # noqa: B018  (settings are loaded with the batcher)
        return (self._settings or Settings()).max_text_chars

    @property
    def pending_cells(self) -> int:
        with self._lock:
            return len(self._pending)

    def rows(
        self,
        task: Task,
        records: Sequence[Any | None],
        to_row: Callable[[Any], list[Any]],
        width: int,
        caller: Any = None,
    ) -> list[list[Any]]:
        """One row of cell values per record (``None`` → a blank row)."""
        batcher = self.batcher
        out: list[list[Any] | None] = [None] * len(records)
        waiting: dict[int, concurrent.futures.Future] = {}
        for i, rec in enumerate(records):
            if rec is None:
                out[i] = filler_row("", width)
                continue
            try:
                res = batcher.resolve(task, task.parse(rec))
            except XladdinError as e:
                out[i] = error_row(e, width)
                continue
            if isinstance(res, concurrent.futures.Future):
                waiting[i] = res
            else:
                out[i] = self._convert(lambda r=res: r, to_row, width)
        if waiting and caller is not None and self.rewrite is not None:
            for i in waiting:
                out[i] = filler_row(PENDING, width)
            self._watch(caller, list(waiting.values()))
        elif waiting:
            done, _ = concurrent.futures.wait(waiting.values(), timeout=batcher.request_timeout)
            for i, fut in waiting.items():
                if fut in done:
                    out[i] = self._convert(fut.result, to_row, width)
                else:
                    out[i] = error_row(XladdinError(f"no answer within {batcher.request_timeout:g}s"), width)
        return out  # type: ignore[return-value]

    def _convert(self, produce: Callable[[], Any], to_row: Callable[[Any], list[Any]], width: int) -> list[Any]:
        """``to_row`` of the produced result; any failure becomes the row's error value."""
        try:
            return to_row(produce())
        except XladdinError as e:
            self.last_error = str(e)
            return error_row(e, width)
        except Exception as e:  # never raise into Excel
            self.last_error = f"internal error: {e}"
            return error_row(e, width)

    def _watch(self, caller: Any, futures: list[concurrent.futures.Future]) -> None:
        key = caller_key(caller)
        with self._lock:
            if key in self._pending:  # an earlier call of this cell will recalculate it
                return
            self._pending[key] = len(futures)

        def one_done(_: concurrent.futures.Future) -> None:
            with self._lock:
                self._pending[key] -= 1
                if self._pending[key]:
                    return
                del self._pending[key]
            try:
                assert self.rewrite is not None
                self.rewrite(caller)
                self.rewrites += 1
            except Exception as e:
                self.last_error = f"cannot recalculate {key}: {e}"
                log.warning(self.last_error)

        for fut in futures:
            fut.add_done_callback(one_done)

    def close(self) -> None:
        with self._lock:
            if self._batcher is not None:
                self._batcher.close()
                self._batcher = None
