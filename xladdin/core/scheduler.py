"""The batcher's queue: requests waiting for the engine, and the batcher's counts.

A request is joined to an identical one already queued or in the engine (one future, one engine
call) or queued; the batcher's workers (``xladdin.core.batcher``) take it longest prompt first, after
a short window that lets a burst of cells arrive and be sorted (one wave).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from .prepared import Prepared


@dataclass
class BatcherStats:
    submitted: int = 0
    cache_hits: int = 0
    recalled: int = 0  # of the cache hits, report rows whose result was kept by their input (no text loaded)
    deduplicated: int = 0
    engine_requests: int = 0
    completed: int = 0
    failed: int = 0
    without_answer: int = 0  # results code gave alone, the model's answer having failed
    timed_out: int = 0  # requests that failed because the engine made no progress within the timeout
    last_error: str | None = None


@dataclass(order=True)
class _Job:
    priority: tuple[int, int]
    request: Prepared = field(compare=False)
    future: asyncio.Future = field(compare=False)


class JobQueue:
    """Requests waiting for the engine: an identical request joins the one queued or in flight
    (one future), the longest prompt goes first, and an idle engine waits ``collect_s`` for a
    burst of cells to arrive (one wave) before the first is taken."""

    def __init__(self, collect_s: float):
        self.collect_s = collect_s
        self.jobs: list[_Job] = []
        self.inflight: dict[str, asyncio.Future] = {}  # queued or in the engine, by request key
        self.waves = 0
        self._wake = asyncio.Event()
        self._seq = itertools.count()
        self._collecting = False

    def __len__(self) -> int:
        return len(self.jobs)

    def put(self, request: Prepared) -> tuple[asyncio.Future, bool]:
        """The future of ``request``'s answer, and whether it joined one already asked."""
        fut = self.inflight.get(request.key)
        if fut is not None:
            return fut, True
        fut = asyncio.get_running_loop().create_future()
        self.inflight[request.key] = fut
        heapq.heappush(self.jobs, _Job((-request.length, next(self._seq)), request, fut))
        self._wake.set()
        return fut, False

    async def take(self, engine_idle: Callable[[], bool]) -> _Job:
        while not self.jobs:
            self._wake.clear()
            await self._wake.wait()
            if engine_idle():  # let the burst arrive, then sort it
                if not self._collecting:
                    self._collecting = True
                    self.waves += 1
                if self.collect_s:
                    await asyncio.sleep(self.collect_s)
                self._collecting = False
        return heapq.heappop(self.jobs)

    def fail_all(self, error: Exception) -> None:
        for fut in self.inflight.values():
            if not fut.done():
                fut.set_exception(error)
