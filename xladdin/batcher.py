"""When requests reach the engine.

An asyncio core runs on its own thread; a thread-safe sync facade serves Excel
threads and the CLI. A request is

1. answered from the cache at once when it can be (in the caller's thread, no
   queue, no event loop round trip);
2. joined to an identical request already in flight (one future, one engine call);
3. otherwise queued. Workers — one per request the engine may hold
   (``xladdin.inflight``: an embedded engine's slots, a limit the user set, or a
   window adapted to a GPU server's load) — take the queue longest prompt first,
   after a short window that lets a burst of cells arrive and be sorted. The
   engine is never given more than that and never left idle while work is queued.

Each answer is validated against the task's output model (one bounded retry),
stored in the cache the moment it arrives, then turned into the task's result.
A failing request fails only its own future.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from .cache import Cache, cache_key
from .engine import Engine, SamplingParams, build_engine
from .errors import EngineError, EngineOffline, XladdinError
from .inflight import CONTROL_INTERVAL_S, Window
from .settings import Settings
from .structured import structured_call
from .tasks.base import Provenance, Task

log = logging.getLogger(__name__)
START_RETRY_S = 30.0  # an engine that failed to start is not asked again for this long


@functools.lru_cache(maxsize=64)
def _provenance(model: str, task_version: str, cached: bool) -> Provenance:
    return Provenance(model=model, task_version=task_version, cached=cached)


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


class Batcher:
    def __init__(
        self,
        engine: Engine,
        cache: Cache,
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
        self.cache = cache
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

    @classmethod
    def from_settings(cls, settings: Settings, engine: Engine | None = None) -> Batcher:
        cache = Cache(settings.cache_dir, enabled=not settings.no_cache)
        own = engine is None
        engine = engine or build_engine(settings)
        params = SamplingParams(temperature=settings.temperature, seed=settings.seed, max_tokens=settings.max_tokens)
        timeout = settings.timeout * (settings.retries + 1) + 5
        return cls(engine, cache, params=params, window_ms=settings.batch_window_ms,
                   max_parallel=settings.max_parallel, request_timeout=timeout, own_engine=own)  # fmt: skip

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

    async def _astart(self) -> None:
        url = getattr(self.engine, "base_url", None)
        try:
            await self.engine.start()
        except EngineOffline:
            remembered = self.cache.get_meta(f"model@{url}") if url else None
            if not remembered:
                raise
            self.engine.model_id = remembered  # serve the cache; misses report the engine offline
        else:
            if url:
                self.cache.set_meta(f"model@{url}", self.engine.model_id)
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
        self.cache.close()

    def __enter__(self) -> Batcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- keys and results
    def key(self, task: Task, inp: BaseModel) -> str:
        return cache_key(task=task.name, task_version=task.version, task_config=task.key_config(),
                         model=self.engine.model_id, params=self._params_dump, inp=inp)  # fmt: skip

    @functools.cached_property
    def _params_dump(self) -> dict[str, Any]:
        return self.params.model_dump()

    def _result(self, task: Task, inp: BaseModel, out: BaseModel, cached: bool) -> Any:
        return task.finish(inp, out, _provenance(self.engine.model_id, task.version, cached))

    def _from_cache(self, task: Task, inp: BaseModel, key: str) -> Any | None:
        stored = self.cache.get(key)
        if stored is None:
            return None
        try:
            out = task.validate_output(stored, inp)
        except (ValidationError, ValueError):
            return None  # written by an older schema: ask again
        with self._lock:
            self.stats.submitted += 1
            self.stats.cache_hits += 1
            self.stats.completed += 1
        return self._result(task, inp, out, cached=True)

    # ---------------------------------------------------------------- sync facade
    def lookup(self, task: Task, inp: BaseModel) -> Any | None:
        """The cached result for ``inp``, or ``None``. Never asks the engine."""
        self.start()
        return self._from_cache(task, inp, self.key(task, inp))

    def resolve(self, task: Task, inp: BaseModel) -> Any:
        """The result itself when cached (the fast path of a recalculating sheet), else a future of it.

        Never waits for the engine: before it has started (loading a model, reaching a server
        that may hang) the future covers the start too, and a recent failure to start is raised."""
        if not self.ready:
            loop = self._running_loop()
            self._raise_recent_failure()
            return asyncio.run_coroutine_threadsafe(self._start_then_ask(task, inp), loop)
        key = self.key(task, inp)
        hit = self._from_cache(task, inp, key)
        if hit is not None:
            return hit
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(self._ask(task, inp, key), self._loop)

    def submit(self, task: Task, inp: BaseModel) -> concurrent.futures.Future:
        """A future of the task's result. Cache hits come back already done."""
        res = self.resolve(task, inp)
        if isinstance(res, concurrent.futures.Future):
            return res
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_result(res)
        return done

    def run(self, task: Task, inp: BaseModel) -> Any:
        """Blocking single request; raises ``XladdinError``."""
        try:
            return self.submit(task, inp).result(self.request_timeout)
        except concurrent.futures.TimeoutError:
            raise XladdinError(f"no answer within {self.request_timeout:g}s ({self.engine.describe()})") from None

    def map(
        self,
        task: Task,
        rows: Iterable[Mapping[str, Any] | BaseModel],
        on_result: Callable[[int, Any], None] | None = None,
    ) -> list[Any]:
        """Results in input order; a bad row or failed request is its ``XladdinError``, not an exception
        (an engine that cannot start is every row's error)."""
        try:
            self.start()
        except EngineError as e:
            results = [e for _ in rows]
            for i, err in enumerate(results):
                if on_result:
                    on_result(i, err)
            return results
        results: list[Any] = []
        pending: dict[concurrent.futures.Future, int] = {}
        for i, row in enumerate(rows):
            try:
                fut = self.submit(task, task.parse(row))
            except Exception as e:  # a bad row (or a bug on one row) is that row's value
                e = e if isinstance(e, XladdinError) else XladdinError(f"internal error: {e.__class__.__name__}: {e}")
                results.append(e)
                if on_result:
                    on_result(i, e)
                continue
            results.append(None)
            pending[fut] = i
        remaining = set(pending)
        while remaining:
            # bounded: if no answer at all arrives for request_timeout, the engine has stalled and
            # the rows still waiting are errors (their requests are cancelled)
            done, remaining = concurrent.futures.wait(remaining, timeout=self.request_timeout,
                                                      return_when=concurrent.futures.FIRST_COMPLETED)  # fmt: skip
            stalled: set[concurrent.futures.Future] = set()
            if not done:
                error = XladdinError(f"no answer within {self.request_timeout:g}s ({self.engine.describe()})")
                for fut in remaining:
                    fut.cancel()
                    results[pending[fut]] = error
                stalled, done, remaining = remaining, remaining, set()
            for fut in done:
                i = pending[fut]
                if fut not in stalled:
                    try:
                        results[i] = fut.result()
                    except XladdinError as e:
                        results[i] = e
                    except Exception as e:  # a bug in one row never loses the others
                        results[i] = XladdinError(f"internal error: {e.__class__.__name__}: {e}")
                if on_result:
                    on_result(i, results[i])
        return results

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            data = asdict(self.stats)
        data.update(queued=len(self._queue), in_flight=len(self._inflight), max_parallel=self.window.limit,
                    peak_in_engine=self.peak_in_engine, model=self.engine.model_id)  # fmt: skip
        return data

    # ---------------------------------------------------------------- async core
    async def _start_then_ask(self, task: Task, inp: BaseModel) -> Any:
        await self._shared_start()
        key = self.key(task, inp)
        return await self._ask(task, inp, key)  # it looks in the cache first

    async def _ask(self, task: Task, inp: BaseModel, key: str) -> Any:
        fut = self._inflight.get(key)
        if fut is None:
            # Answers are cached and leave ``_inflight`` on this loop thread, so a
            # request that missed the cache in its caller thread checks once more.
            hit = self._from_cache(task, inp, key)
            if hit is not None:
                return hit
        with self._lock:
            self.stats.submitted += 1
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
        try:
            out = await asyncio.shield(fut)
        except XladdinError as e:
            with self._lock:
                self.stats.failed += 1
                self.stats.last_error = str(e)
            raise
        with self._lock:
            self.stats.completed += 1
        return self._result(task, inp, out, cached=False)

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
                self.cache.set(job.key, out.model_dump(mode="json"))
                job.future.set_result(out)
            finally:
                self._in_engine -= 1
                self._inflight.pop(job.key, None)

    def _count_request(self) -> None:
        with self._lock:
            self.stats.engine_requests += 1
