"""How requests reach the engine: one asyncio loop on its own thread, a queue, and workers.

A request is joined to an identical one already in flight (one future, one engine call) or
queued. Workers — one per request the engine may hold (``xladdin.inflight``: an embedded
engine's slots, a limit the user set, or a window adapted to a GPU server's load) — take the
queue longest prompt first, after a short window that lets a burst of cells arrive and be
sorted. The engine is never given more than that and never left idle while work is queued.
Each answer goes through one ``structured_call`` (validated, re-asked once with the error)
and is handed to ``_store`` the moment it arrives; a failing request fails only its own future.

The engine starts on the loop, once, shared by every request that arrives meanwhile; its
failure is remembered for ``START_RETRY_S`` seconds and raised at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

from pydantic import BaseModel

from .engine import Engine, SamplingParams
from .errors import EngineError, XladdinError
from .inflight import CONTROL_INTERVAL_S, Window
from .structured import structured_call
from .tasks.base import Task

log = logging.getLogger(__name__)
START_RETRY_S = 30.0  # an engine that failed to start is not asked again for this long


@dataclass
class BatcherStats:
    submitted: int = 0
    cache_hits: int = 0
    deduplicated: int = 0
    engine_requests: int = 0
    completed: int = 0
    failed: int = 0
    waves: int = 0
    last_error: str | None = None


@dataclass(order=True)
class _Job:
    priority: tuple[int, int]
    key: str = field(compare=False)
    task: Task = field(compare=False)
    inp: BaseModel = field(compare=False)
    messages: list[dict[str, str]] = field(compare=False)
    future: asyncio.Future = field(compare=False)


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        *,
        params: SamplingParams | None = None,
        window_ms: float = 20.0,
        max_parallel: int | None = None,
        output_retries: int = 1,
        request_timeout: float | None = None,
        own_engine: bool = False,
    ):
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
        self._life = threading.Lock()  # start / close
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._queue: list[_Job] = []
        self._inflight: dict[str, asyncio.Future] = {}
        self._wake: asyncio.Event | None = None
        self._seq = itertools.count()
        self._workers: list[asyncio.Task] = []
        self._in_engine = 0
        self._n_workers = 0
        self._collecting = False
        self.peak_in_engine = 0
        self.start_retry_s = START_RETRY_S
        self._start_failed: tuple[float, EngineError] | None = None
        self._starting: asyncio.Future | None = None

    # ---------------------------------------------------------------- lifecycle
    @property
    def ready(self) -> bool:
        """The engine has started and named its model: requests can be keyed and answered."""
        return bool(self.engine.model_id and self._workers)

    def start(self) -> None:
        """Start the loop thread and the engine, and wait for it (idempotent, thread-safe).

        An engine that cannot start (offline, timing out) raises its ``EngineError``; the failure
        is remembered for ``START_RETRY_S`` seconds, so a sheet of cells asking meanwhile gets
        the error at once instead of each waiting for the engine again."""
        if self.ready:
            return
        loop = self._running_loop()
        self._raise_recent_failure()
        asyncio.run_coroutine_threadsafe(self._shared_start(), loop).result()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._life:
            if not self._started:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="xladdin-batcher", daemon=True)
                thread.start()
                self._loop, self._thread, self._started = loop, thread, True
            assert self._loop is not None
            return self._loop

    def _raise_recent_failure(self) -> None:
        failed = self._start_failed
        if failed is not None and time.monotonic() - failed[0] < self.start_retry_s:
            raise failed[1]

    async def _shared_start(self) -> None:
        """One start at a time on the loop; everyone asking meanwhile awaits the same one."""
        if self.ready:
            return
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._astart())
        starting = self._starting
        try:
            await asyncio.shield(starting)
        except EngineError as e:
            self._start_failed = (time.monotonic(), e)
            raise
        finally:
            if starting.done() and self._starting is starting:
                self._starting = None
        self._start_failed = None

    async def _start_engine(self) -> None:
        """Start the engine (a subclass may serve from a cache when it cannot)."""
        await self.engine.start()

    async def _astart(self) -> None:
        await self._start_engine()
        if not self.engine.model_id:  # the model id is part of every cache key
            raise EngineError(f"{self.engine.describe()}: the engine did not name its model")
        self.window = self._window()  # the engine now knows its slots, or whether its server reports load
        self._wake = asyncio.Event()
        self._spawn_workers()
        if self.window.adaptive:
            self._workers.append(asyncio.create_task(self._control()))

    def close(self, *, abort: bool = False) -> None:
        """Stop the workers and (if owned) the engine. ``abort`` (Ctrl-C) does not wait for
        requests the engine is still computing; every finished answer is already cached."""
        with self._life:
            started, self._started = self._started, False
            loop, thread = self._loop, self._thread
        if started:
            assert loop is not None and thread is not None

            async def _stop() -> None:
                for w in self._workers:
                    w.cancel()
                for fut in self._inflight.values():  # callers waiting on unanswered requests get an error
                    if not fut.done():
                        fut.set_exception(XladdinError("closed before the answer arrived"))
                await asyncio.sleep(0)
                if self.own_engine:
                    if abort:
                        self.engine.abort()
                    await self.engine.aclose()

            # no lock held here: the loop thread may still be finishing requests that count stats
            try:
                asyncio.run_coroutine_threadsafe(_stop(), loop).result(30)
            except concurrent.futures.TimeoutError:
                log.warning("the engine did not stop within 30 s; closing anyway")
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
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

    async def _schedule(self, key: str, task: Task, inp: BaseModel) -> BaseModel:
        """The validated answer for ``key``: joins the request in flight, or queues a new one."""
        fut = self._inflight.get(key)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._inflight[key] = fut
            messages = task.messages(inp)
            length = sum(len(m["content"]) for m in messages)
            heapq.heappush(self._queue, _Job((-length, next(self._seq)), key, task, inp, messages, fut))
            assert self._wake is not None
            self._wake.set()
        else:
            with self._lock:
                self.stats.deduplicated += 1
        return await asyncio.shield(fut)

    async def _next_job(self) -> _Job:
        assert self._wake is not None
        while not self._queue:
            self._wake.clear()
            await self._wake.wait()
            if self._in_engine == 0:  # idle engine: let the burst arrive, then sort it
                if not self._collecting:
                    self._collecting = True
                    with self._lock:
                        self.stats.waves += 1
                if self.collect_s:
                    await asyncio.sleep(self.collect_s)
                self._collecting = False
        return heapq.heappop(self._queue)

    def _window(self) -> Window:
        cap = self.engine.max_parallel
        n = max(1, min(self.max_parallel_setting or cap, cap))
        adaptive = self.max_parallel_setting is None and self.engine.reports_load
        return Window.adaptive_up_to(n) if adaptive else Window.fixed(n)

    def _spawn_workers(self) -> None:
        """One worker per request the window allows (workers beyond it retire after their request)."""
        while self._n_workers < self.window.limit:
            self._n_workers += 1
            self._workers.append(asyncio.create_task(self._worker()))

    async def _control(self) -> None:
        """Adapt the window to the server's load while work is queued here."""
        while True:
            await asyncio.sleep(CONTROL_INTERVAL_S)
            if not self._queue or not self._in_engine:
                continue
            load = await self.engine.server_load()
            if load is None:
                return  # the server does not report its load: keep the window
            self.window.update(*load, in_engine=self._in_engine, queued=len(self._queue))
            self._spawn_workers()
            self._workers = [w for w in self._workers if not w.done()]

    async def _worker(self) -> None:
        try:
            await self._work()
        finally:
            self._n_workers -= 1

    async def _work(self) -> None:
        while self._n_workers <= self.window.limit:
            job = await self._next_job()
            self._in_engine += 1
            self.peak_in_engine = max(self.peak_in_engine, self._in_engine)
            try:
                out = await structured_call(self.engine, job.task, job.inp, job.messages, self.params,
                                            retries=self.output_retries, asked=self._count_request)  # fmt: skip
            except XladdinError as e:
                job.future.set_exception(e)
            except Exception as e:
                job.future.set_exception(XladdinError(f"internal error: {e.__class__.__name__}: {e}"))
            else:
                self._store(job.key, out)
                job.future.set_result(out)
            finally:
                self._in_engine -= 1
                self._inflight.pop(job.key, None)

    def _count_request(self) -> None:
        with self._lock:
            self.stats.engine_requests += 1
