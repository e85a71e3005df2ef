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
   cache the moment it arrives) or has failed, the cell is recalculated through
   ``rewrite(caller)`` — on Windows ``xladdin.excel.com``, which rewrites the
   cell's formula on xlwings' COM loop with its retry on a busy Excel. The UDF
   runs again, now a pure cache hit. A failed request is remembered for
   ``ERROR_TTL`` seconds, so the recalculated cell shows its ``#QWEN!`` error
   instead of asking a down engine again in a loop.

So 500 filled-down rows become one queue that the batcher feeds to the
engine at its full parallelism, however few threads Excel has. Outside Excel
(``caller`` is None, e.g. tests, scripts, or no COM) a call waits for its
answers instead, up to the request timeout.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ..batcher import Batcher
from ..errors import XladdinError
from ..settings import Settings
from ..tasks.base import Task
from .cells import PENDING, error_row, filler_row

log = logging.getLogger(__name__)
MEMO_ROWS = 50_000
ERROR_TTL = 30.0  # seconds a failed request is shown as its error before a recalculation asks again
Rewrite = Callable[[Any], None]


def _memo_key(identity: Hashable, record: Any) -> Hashable | None:
    try:
        key = (identity, tuple(record.items()) if isinstance(record, dict) else record)
        hash(key)
    except TypeError:  # a value Excel never passes (a list): no memo for it
        return None
    return key


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
        self._failed: dict[str, tuple[float, BaseException]] = {}  # request key → (when, error)
        # (task identity, cell values) → cell row, for answers already read from the cache: a
        # recalculation of an open workbook skips parsing, hashing and the disk entirely
        self._memo: collections.OrderedDict[Hashable, list[Any]] = collections.OrderedDict()
        self.error_ttl = ERROR_TTL
        self.last_error: str | None = None

    @property
    def batcher(self) -> Batcher:
        with self._lock:
            if self._batcher is None:
                self._settings = settings = self._settings or Settings.load()
                # the engine starts on the first request; a failure to start is that cell's error
                self._batcher = Batcher.from_settings(settings)
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
        # the key of a failed request is taken when it fails: before the engine has started (and
        # named its model) no key can be final
        waiting: dict[int, tuple[Callable[[], str], concurrent.futures.Future]] = {}
        identity = task.identity()
        for i, rec in enumerate(records):
            if rec is None:
                out[i] = filler_row("", width)
                continue
            memo_key = _memo_key(identity, rec)
            if memo_key is not None and (row := self._memo.get(memo_key)) is not None:
                out[i] = row
                continue
            try:
                inp = task.parse(rec)
                failed = self._failed.get(batcher.key(task, inp)) if self._failed else None
                if failed is not None and time.monotonic() - failed[0] < self.error_ttl:
                    # recalculated because its request failed: show the error, do not ask again
                    # at once (a down engine would otherwise be asked in a loop)
                    out[i] = error_row(failed[1], width)
                    continue
                res = batcher.resolve(task, inp)
            except XladdinError as e:
                self.last_error = str(e)
                out[i] = error_row(e, width)
                continue
            if isinstance(res, concurrent.futures.Future):
                waiting[i] = (functools.partial(batcher.key, task, inp), res)
            else:
                out[i] = self._convert(lambda r=res: r, to_row, width, memo_key)
        if waiting and caller is not None and self.rewrite is not None:
            for i in waiting:
                out[i] = filler_row(PENDING, width)
            self._watch(caller, list(waiting.values()))
        elif waiting:
            futures = {i: fut for i, (_, fut) in waiting.items()}
            done, _ = concurrent.futures.wait(futures.values(), timeout=batcher.request_timeout)
            for i, fut in futures.items():
                if fut in done:
                    out[i] = self._convert(fut.result, to_row, width)
                else:
                    out[i] = error_row(XladdinError(f"no answer within {batcher.request_timeout:g}s"), width)
        return out  # type: ignore[return-value]

    def _convert(self, produce: Callable[[], Any], to_row: Callable[[Any], list[Any]], width: int,
                 memo_key: Hashable | None = None) -> list[Any]:  # fmt: skip
        """``to_row`` of the produced result (remembered under ``memo_key``); a failure is the row's error."""
        try:
            row = to_row(produce())
            if memo_key is not None:
                with self._lock:
                    self._memo[memo_key] = row
                    if len(self._memo) > MEMO_ROWS:
                        self._memo.popitem(last=False)
            return row
        except XladdinError as e:
            self.last_error = str(e)
            return error_row(e, width)
        except Exception as e:  # never raise into Excel
            self.last_error = f"internal error: {e}"
            return error_row(e, width)

    def _watch(self, caller: Any, requests: list[tuple[Callable[[], str], concurrent.futures.Future]]) -> None:
        key = caller_key(caller)
        with self._lock:
            if key in self._pending:  # an earlier call of this cell will recalculate it
                return
            self._pending[key] = len(requests)

        def one_done(request_key: Callable[[], str], fut: concurrent.futures.Future) -> None:
            error = None if fut.cancelled() else fut.exception()
            with self._lock:
                if error is not None:
                    now = time.monotonic()
                    self._failed = {k: v for k, v in self._failed.items() if now - v[0] < self.error_ttl}
                    self._failed[request_key()] = (now, error)
                self._pending[key] -= 1
                if self._pending[key]:
                    return
                del self._pending[key]
            try:
                assert self.rewrite is not None
                self.rewrite(caller)
            except Exception as e:
                self.last_error = f"cannot recalculate {key}: {e}"
                log.warning(self.last_error)

        for request_key, fut in requests:
            fut.add_done_callback(functools.partial(one_done, request_key))

    def close(self, *, abort: bool = False) -> None:
        with self._lock:
            batcher, self._batcher = self._batcher, None
        if batcher is not None:  # closed without the lock: its last callbacks take it
            batcher.close(abort=abort)
