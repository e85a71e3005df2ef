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
import contextlib
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, ValidationError

from .cache import Cache
from .engine import Engine, build_engine
from .errors import EngineOffline, EngineStalled, EngineTimeout, XladdinError
from .fitting import ContextFit
from .prepared import Prepared, Requests
from .reading import Reader
from .scheduler import Scheduler
from .settings import Settings
from .tasks.base import Task


@contextlib.contextmanager
def started(settings: Settings, batcher: Batcher | None = None) -> Iterator[Batcher]:
    """The core for one front door's job, started: ``batcher`` when given (its owner closes it), else one
    built from ``settings`` and closed afterwards (without waiting for the engine after Ctrl-C)."""
    own = batcher is None
    core = batcher or Batcher.from_settings(settings)
    interrupted = False
    try:
        core.start()
        yield core
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        if own:
            core.close(abort=interrupted)


class Batcher(Scheduler):
    """The scheduler with the cache in front: keys, cache hits, results, and the sync facade."""

    def __init__(self, engine: Engine, cache: Cache, *, text_tokens: int = 1500, **options: Any):
        super().__init__(engine, **options)
        self.cache = cache
        self.context = ContextFit(engine, cache, self.params.max_tokens, text_tokens)
        self.requests = Requests(engine, self.params, self.context)
        self.reader = Reader(cache)  # report files, read once in reader processes (started when needed)

    @classmethod
    def from_settings(cls, settings: Settings, engine: Engine | None = None, *,
                      own_engine: bool | None = None) -> Batcher:
        """The core ``settings`` give; an ``engine`` given is closed with it only when ``own_engine``."""
        cache = Cache(settings.cache_dir, enabled=not settings.no_cache)
        own = engine is None if own_engine is None else own_engine
        engine = engine or build_engine(settings)
        options = settings.options_for(engine.kind)
        timeout = options.timeout * (getattr(options, "retries", 0) + 1) + 5
        batcher = cls(engine, cache, params=settings.sampling, window_ms=settings.batch_window_ms,
                      text_tokens=settings.text_tokens, max_parallel=options.max_parallel, request_timeout=timeout,
                      own_engine=own)
        batcher.reader.processes = settings.readers or batcher.reader.processes
        return batcher

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
        await self.context.measure()

    def fit(self, task: Task) -> Task:
        """``task`` with its report text sized to the engine (``fitting.ContextFit``)."""
        return self.context.fit(task)

    @property
    def tokens_per_char(self) -> float | None:
        return self.context.tokens_per_char

    def _store(self, key: str, out: BaseModel) -> None:
        self.cache.set(key, out.model_dump(mode="json"))

    def _closed(self) -> None:
        self.reader.close()
        self.cache.close()

    def __enter__(self) -> Batcher:
        return self

    # ---------------------------------------------------------------- keys and results
    def key(self, task: Task, inp: BaseModel) -> str:
        return self.requests.key(task, inp)

    def prepare(self, task: Task, inp: BaseModel) -> Prepared:
        """``inp``'s request, once (the engine has started: its model is in the key)."""
        return self.requests.prepare(task, inp)

    def _from_cache(self, request: Prepared) -> Any | None:
        stored = self.cache.get(request.key)
        if stored is None:
            return None
        try:
            out = request.validate(stored)
        except (ValidationError, ValueError):
            return None  # written by an older schema: ask again
        with self._lock:
            self.stats.submitted += 1
            self.stats.cache_hits += 1
            self.stats.completed += 1
        return request.finish(out, True)

    # ---------------------------------------------------------------- sync facade
    def lookup(self, task: Task, inp: BaseModel) -> Any | None:
        """The cached result for ``inp``, or ``None``. Never asks the engine."""
        self.start()
        return self._from_cache(self.prepare(task, inp))

    def resolve(self, task: Task, inp: BaseModel) -> Any:
        """The result itself when cached (the fast path of a recalculating sheet), else a future of it.

        Never waits for the engine: before it has started (loading a model, reaching a server
        that may hang) the future covers the start too, and a recent failure to start is raised.
        What becomes of the future's result is the caller's to keep (``Resolver``): nothing here
        remembers it but the disk cache."""
        if not self.ready:
            self.loop.get()
            self.shared_start.raise_recent_failure()
            return self.loop.submit(self._start_then_ask(task, inp))
        request = self.prepare(task, inp)
        hit = self._from_cache(request)
        if hit is not None:
            return hit
        return self.loop.submit(self._ask(request))

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
            raise EngineStalled(f"no answer within {self.request_timeout:g}s ({self.engine.describe()})") from None

    def count_timed_out(self, n: int) -> None:
        """``n`` rows given up on by a table's bound (the engine stalled)."""
        with self._lock:
            self.stats.timed_out += n

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            data = asdict(self.stats)
        q = self.queue
        data.update(queued=len(q.jobs) if q else 0, in_flight=len(q.inflight) if q else 0, waves=q.waves if q else 0,
                    max_parallel=self.window.limit, peak_in_engine=self.peak_in_engine,
                    model=self.engine.model_id)
        return data

    # ---------------------------------------------------------------- async core
    async def _start_then_ask(self, task: Task, inp: BaseModel) -> Any:
        await self._ensure_started()
        return await self._ask(self.prepare(task, inp))  # it looks in the cache first

    async def _ask(self, request: Prepared) -> Any:
        if self.queue is None or request.key not in self.queue.inflight:
            # Answers are cached and leave the queue's in-flight map on this loop thread, so a
            # request that missed the cache in its caller thread checks once more.
            hit = self._from_cache(request)
            if hit is not None:
                return hit
        with self._lock:
            self.stats.submitted += 1
        try:
            out = await self._schedule(request)
        except XladdinError as e:
            alone = request.alone(e)
            with self._lock:
                self.stats.last_error = str(e)
                self.stats.timed_out += isinstance(e, EngineTimeout)
                if alone is None:
                    self.stats.failed += 1
                else:
                    self.stats.completed += 1
                    self.stats.without_answer += 1
            if alone is None:
                raise
            return alone
        with self._lock:
            self.stats.completed += 1
        return request.finish(out, False)

