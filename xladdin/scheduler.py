"""How requests reach the engine: one asyncio loop on its own thread, a queue, and workers.

A request is joined to an identical one already in flight (one future, one engine call) or
queued. Workers — one per request the engine may hold (``xladdin.inflight``: an embedded
engine's slots, a limit the user set, or a window adapted to a GPU server's load) — take the
queue longest prompt first, after a short window that lets a burst of cells arrive and be
sorted. The engine is never given more than that and never left idle while work is queued.
A request comes prepared (``xladdin.prepared``: messages, schema, validator, key, model); each
answer goes through one ``structured_call`` (validated, re-asked once with the error) and is
handed to ``_store`` the moment it arrives, only when the engine still serves the request's
model; a failing request fails only its own future. The loop thread and the engine's shared
start are ``xladdin.lifecycle``'s.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from .engine import Engine, SamplingParams
from .errors import EngineError, XladdinError, internal_error
from .inflight import CONTROL_INTERVAL_S, Window
from .lifecycle import LoopThread, SharedStart
from .prepared import Prepared
from .structured import structured_call


@dataclass
class BatcherStats:
    submitted: int = 0
    cache_hits: int = 0
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


class Scheduler:
    def __init__(self, engine: Engine, *, params: SamplingParams | None = None, window_ms: float = 20.0,
                 max_parallel: int | None = None, output_retries: int = 1, request_timeout: float | None = None,
                 own_engine: bool = False):
        self.engine = engine
        self.own_engine = own_engine
        self.params = params or SamplingParams()
        self.collect_s = window_ms / 1000
        self.max_parallel_setting = max_parallel
        self.window = self._window()
        self.output_retries = output_retries
        self.request_timeout = request_timeout
        self.stats = BatcherStats()
        self._lock = threading.Lock()  # stats
        self.loop = LoopThread("xladdin-batcher")
        self.shared_start = SharedStart(self._astart)
        self.queue: JobQueue | None = None  # made on the loop, when the engine has started
        self._workers: list[asyncio.Task] = []
        self._in_engine = 0
        self._n_workers = 0
        self.peak_in_engine = 0
        self.last_answer = 0.0  # when a request last settled (monotonic)

    # ---------------------------------------------------------------- lifecycle
    @property
    def ready(self) -> bool:
        """The engine has started and named its model: requests can be keyed and answered."""
        return bool(self.engine.model_id and self._workers)

    def start(self) -> None:
        """Start the loop thread and the engine, and wait for it (idempotent, thread-safe).

        An engine that cannot start (offline, timing out) raises its ``EngineError``, and a
        recent failure is raised at once (``lifecycle.SharedStart``)."""
        if self.ready:
            return
        self.loop.get()
        self.shared_start.raise_recent_failure()
        self.loop.submit(self._ensure_started()).result()

    async def _ensure_started(self) -> None:
        if not self.ready:
            await self.shared_start()

    async def _start_engine(self) -> None:
        """Start the engine (a subclass may serve from a cache when it cannot)."""
        await self.engine.start()

    async def _astart(self) -> None:
        await self._start_engine()
        if not self.engine.model_id:  # the model id is part of every cache key
            raise EngineError(f"{self.engine.describe()}: the engine did not name its model")
        self.window = self._window()  # the engine now knows its slots, or whether its server reports load
        self.queue = JobQueue(self.collect_s)
        self._spawn_workers()
        if self.window.adaptive:
            self._workers.append(asyncio.create_task(self._control()))

    def close(self, *, abort: bool = False) -> None:
        """Stop the workers and (if owned) the engine. ``abort`` (Ctrl-C) does not wait for
        requests the engine is still computing; every finished answer is already cached."""

        async def _stop() -> None:
            for w in self._workers:
                w.cancel()
            if self.queue is not None:  # callers waiting on unanswered requests get an error
                self.queue.fail_all(XladdinError("closed before the answer arrived"))
            await asyncio.sleep(0)
            if self.own_engine:
                if abort:
                    self.engine.abort()
                await self.engine.aclose()

        self.loop.stop(_stop)  # no lock held: the loop thread may still be finishing requests that count stats
        self._closed()

    def _closed(self) -> None:
        """After the loop has stopped (a subclass releases what it holds)."""

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- the queue and its workers
    def _store(self, key: str, out: BaseModel) -> None:
        """A validated answer, the moment it arrives (a subclass caches it)."""

    async def _schedule(self, request: Prepared) -> BaseModel:
        """The validated answer to ``request``: joins the request in flight, or queues a new one."""
        assert self.queue is not None
        fut, joined = self.queue.put(request)
        if joined:
            with self._lock:
                self.stats.deduplicated += 1
        return await asyncio.shield(fut)

    def _window(self) -> Window:
        return Window.for_engine(self.engine.max_parallel, self.engine.reports_load, self.max_parallel_setting)

    def _spawn_workers(self) -> None:
        """One worker per request the window allows (workers beyond it retire after their request)."""
        while self._n_workers < self.window.limit:
            self._n_workers += 1
            self._workers.append(asyncio.create_task(self._worker()))

    async def _control(self) -> None:
        """Adapt the window to the server's load while work is queued here."""
        while True:
            await asyncio.sleep(CONTROL_INTERVAL_S)
            assert self.queue is not None
            if not self.queue or not self._in_engine:
                continue
            load = await self.engine.server_load()
            if load is None:
                return  # the server does not report its load: keep the window
            self.window.update(*load, in_engine=self._in_engine, queued=len(self.queue))
            self._spawn_workers()
            self._workers = [w for w in self._workers if not w.done()]

    async def _worker(self) -> None:
        try:
            await self._work()
        finally:
            self._n_workers -= 1

    async def _work(self) -> None:
        assert self.queue is not None
        while self._n_workers <= self.window.limit:
            job = await self.queue.take(lambda: self._in_engine == 0)
            self._in_engine += 1
            self.peak_in_engine = max(self.peak_in_engine, self._in_engine)
            request = job.request
            try:
                out = await structured_call(self.engine, request, self.params, retries=self.output_retries,
                                            asked=self._count_request)
                if self.engine.model_id != request.model:  # the key names a model that did not give this answer
                    raise EngineError(f"{self.engine.describe()} answered, but the request was asked of "
                                      f"{request.model}: the answer is not stored")
            except XladdinError as e:
                job.future.set_exception(e)
            except Exception as e:
                job.future.set_exception(internal_error(e))
            else:
                self._store(request.key, out)
                job.future.set_result(out)
            finally:
                self._in_engine -= 1
                self.queue.inflight.pop(request.key, None)
                self.last_answer = time.monotonic()

    def last_sign_of_life(self) -> float:
        """When the engine last answered or showed it was working (monotonic): a table's bound on waiting
        counts from here, so a slow engine that is computing is not taken for a stalled one."""
        return max(self.last_answer, self.engine.last_progress)

    def _count_request(self) -> None:
        with self._lock:
            self.stats.engine_requests += 1
