"""How many requests the batcher keeps in the engine at once (``Window``), and the requests that wait for it
(``JobQueue``). An embedded engine has a fixed
number of slots: that many, no more. A GPU server batches whatever it is given up to its own limit (vLLM's
``--max-num-seqs``, or less when the KV cache is full), and the right number for it is unknown to the
client. Too few leaves the GPU idle and far too many only queues requests in the server (measured by window
size on one H200: ``bench/results/gpu.json``, ``sweep``).

So for a server that reports its load (vLLM's ``/metrics``: requests running and waiting), the window
adapts: it doubles while the server runs everything it is sent and work is queued here, and when requests
wait in the server while it runs no more than at the last reading (it takes no more: it is full), it settles
at what the server runs plus a small margin, so a finished sequence is replaced at once. Requests waiting
while the server's running count still grows are being admitted (a step takes only so many new prompts): the
window is kept, not cut to what runs so far (on one H200 a window cut so swung between ~100 and ~1,000
running). A limit set by the user is kept as given.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from .requests import Prepared

INITIAL = 64  # where an adaptive window starts: well under any GPU server's batch
CONTROL_INTERVAL_S = 0.5  # how often the server's load is read while work is queued


def margin(running: int) -> int:
    """Requests kept waiting in the server beyond what it runs (covers the round trip)."""
    return max(4, running // 16)


@dataclass
class Window:
    limit: int
    cap: int
    adaptive: bool = False
    readings: int = 0
    last_running: int = 0  # the server's running requests at the last reading

    @classmethod
    def fixed(cls, n: int) -> Window:
        return cls(limit=n, cap=n)

    @classmethod
    def for_engine(cls, slots: int, reports_load: bool, setting: int | None) -> Window:
        """A user's limit as given (at most the engine's ``slots``); else the engine's slots, adapting
        up to them when the engine reports its load."""
        n = max(1, min(setting or slots, slots))
        return cls.adaptive_up_to(n) if setting is None and reports_load else cls.fixed(n)

    @classmethod
    def adaptive_up_to(cls, cap: int) -> Window:
        return cls(limit=min(INITIAL, cap), cap=cap, adaptive=True)

    def update(self, running: int, waiting: int, in_engine: int, queued: int) -> int:
        """The new limit after one reading of the server's load."""
        self.readings += 1
        if waiting > 0 and running > 0:
            if running <= self.last_running:  # the server is full: run what it runs, keep a few waiting
                self.limit = running + margin(running)
            # else it is still admitting what it was sent: the window stays
        elif queued and in_engine >= self.limit:  # the server took everything: offer more
            self.limit *= 2
        self.last_running = running
        self.limit = max(1, min(self.cap, self.limit))
        return self.limit


@dataclass(order=True)
class _Job:
    priority: tuple[int, int]
    request: Prepared = field(compare=False)
    future: asyncio.Future = field(compare=False)


class JobQueue:
    """Requests waiting for the engine: the longest prompt goes first, and an idle engine waits
    ``collect_s`` for a burst of cells to arrive (one wave) before the first is taken. (An identical
    request never comes twice: it joins the first in the table of fates.)"""

    def __init__(self, collect_s: float):
        self.collect_s = collect_s
        self.jobs: list[_Job] = []
        self.waves = 0
        self._wake = asyncio.Event()
        self._seq = itertools.count()
        self._collecting = False

    def __len__(self) -> int:
        return len(self.jobs)

    def put(self, request: Prepared) -> asyncio.Future:
        """The future of ``request``'s answer."""
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self.jobs, _Job((-request.length, next(self._seq)), request, fut))
        self._wake.set()
        return fut

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
