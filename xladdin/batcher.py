"""When requests reach the engine, and what never needs to.

A thread-safe sync facade serves the ``Resolver`` (every front door: Excel, the CLI, Refresh,
pandas); the asyncio core is the ``Scheduler`` (``xladdin.scheduler``). A request is

1. answered from the cache at once when it can be (in the caller's thread, no queue, no event
   loop round trip);
2. otherwise handed to the scheduler (joined to an identical request in flight, or queued);
   a caller never waits for the engine to start: before it has, the future covers the start.

Each answer is stored in the cache the moment it arrives, then turned into the task's result.
"""

from __future__ import annotations

import concurrent.futures
import functools
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, ValidationError

from .cache import Cache, cache_key
from .engine import Engine, SamplingParams, build_engine
from .errors import EngineOffline, OutputError, XladdinError
from .scheduler import Scheduler
from .settings import Settings
from .tasks.base import Provenance, Task

ALONE_ROWS = 10_000  # results without a model answer kept in memory


@functools.lru_cache(maxsize=64)
def _provenance(model: str, task_version: str, cached: bool) -> Provenance:
    return Provenance(model=model, task_version=task_version, cached=cached)


class Batcher(Scheduler):
    """The scheduler with the cache in front: keys, cache hits, results, and the sync facade."""

    def __init__(self, engine: Engine, cache: Cache, **options: Any):
        super().__init__(engine, **options)
        self.cache = cache
        # Results given without a model answer (``Task.without_answer``) never go to the disk; they
        # are kept for this process, by request key, so that a sheet recalculating the cell does not
        # ask the model again in a loop. A new process asks again.
        self._alone: dict[str, Any] = {}

    @classmethod
    def from_settings(cls, settings: Settings, engine: Engine | None = None) -> Batcher:
        cache = Cache(settings.cache_dir, enabled=not settings.no_cache)
        own = engine is None
        engine = engine or build_engine(settings)
        params = SamplingParams(temperature=settings.temperature, seed=settings.seed, max_tokens=settings.max_tokens)
        timeout = settings.timeout * (settings.retries + 1) + 5
        return cls(engine, cache, params=params, window_ms=settings.batch_window_ms,
                   max_parallel=settings.max_parallel, request_timeout=timeout, own_engine=own)  # fmt: skip

    async def _start_engine(self) -> None:
        """Start the engine; an offline server seen before is known by the model id it had, so the
        answers already cached for it are still served (misses report the engine offline)."""
        url = self.engine.server_url
        try:
            await self.engine.start()
        except EngineOffline:
            remembered = self.cache.get_meta(f"model@{url}") if url else None
            if not remembered:
                raise
            self.engine.model_id = remembered
        else:
            if url:
                self.cache.set_meta(f"model@{url}", self.engine.model_id)

    def _store(self, key: str, out: BaseModel) -> None:
        self.cache.set(key, out.model_dump(mode="json"))

    def _closed(self) -> None:
        self.cache.close()

    def __enter__(self) -> Batcher:
        return self

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
            self.loop.get()
            self.shared_start.raise_recent_failure()
            return self.loop.submit(self._start_then_ask(task, inp))
        key = self.key(task, inp)
        hit = self._from_cache(task, inp, key)
        if hit is None and self._alone:
            hit = self._alone.get(key)
        if hit is not None:
            return hit
        return self.loop.submit(self._ask(task, inp, key))

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

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            data = asdict(self.stats)
        q = self.queue
        data.update(queued=len(q.jobs) if q else 0, in_flight=len(q.inflight) if q else 0, waves=q.waves if q else 0,
                    max_parallel=self.window.limit, peak_in_engine=self.peak_in_engine,
                    model=self.engine.model_id)  # fmt: skip
        return data

    # ---------------------------------------------------------------- async core
    async def _start_then_ask(self, task: Task, inp: BaseModel) -> Any:
        await self._ensure_started()
        key = self.key(task, inp)
        return await self._ask(task, inp, key)  # it looks in the cache first

    async def _ask(self, task: Task, inp: BaseModel, key: str) -> Any:
        if self.queue is None or key not in self.queue.inflight:
            # Answers are cached and leave the queue's in-flight map on this loop thread, so a
            # request that missed the cache in its caller thread checks once more.
            hit = self._from_cache(task, inp, key)
            if hit is not None:
                return hit
        with self._lock:
            self.stats.submitted += 1
        try:
            out = await self._schedule(key, task, inp)
        except XladdinError as e:
            provenance = _provenance(self.engine.model_id, task.version, False)
            alone = task.without_answer(inp, e, provenance) if isinstance(e, OutputError) else None
            with self._lock:
                self.stats.last_error = str(e)
                if alone is None:
                    self.stats.failed += 1
                else:
                    self.stats.completed += 1
                    self.stats.without_answer += 1
                    if len(self._alone) >= ALONE_ROWS:
                        del self._alone[next(iter(self._alone))]  # the oldest
                    self._alone[key] = alone
            if alone is None:
                raise
            return alone
        with self._lock:
            self.stats.completed += 1
        return self._result(task, inp, out, cached=False)
