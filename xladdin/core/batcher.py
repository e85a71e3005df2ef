"""When requests reach the engine, and what never needs to: one class, ``Batcher`` (one request sized,
prepared and asked: ``requests``).

Every front door asks through the ``Resolver``, which asks here: ``load`` gives a request's one future (its
fate in the table, ``fates.Fates``: the one already there for the same request, or a new one) and never
waits. Each new request is one coroutine on the loop thread (``threads.LoopThread``), awaiting in order:

1. the engine's start (once, shared: its fate is in the table too, a failure the answer for its time);
2. its one read of the disk cache, on the disk thread (``threads.SerialThread``: never a caller's thread,
   never the loop): a hit's result is made on the rows thread, and the fate is settled;
3. otherwise (the fate ``looked``: a caller waiting for the read stops waiting) the engine, queued
   (``JobQueue``): workers, one per request the engine may hold (``Window``, below: what the engine says, a
   limit the user set in its options, or a window adapted to a GPU server's load), take the queue longest
   prompt first after a short window that lets a burst of cells arrive (one wave); the engine is never given
   more and never left idle while work is queued;
4. the answer's write to the cache, then its result, made on the rows thread.

Each answer goes through one ``structured_call`` (validated, re-asked once with the error), is
stored in the cache the moment it arrives (on the disk thread, awaited before its fate settles;
only while the engine still serves the request's model) and turned into the task's result on the
rows thread; a failing request fails only its own fate. How long a request may go without a sign of life is
the engine's to say (``Engine.stall_s``).
How many requests it keeps in the engine at once: ``window``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from pydantic import BaseModel, ValidationError

from ..engine import Engine, SamplingParams, Started, build_engine
from ..errors import (
    ConfigError,
    EngineError,
    EngineOffline,
    EngineStalled,
    EngineTimeout,
    XladdinError,
    row_error,
)
from ..settings import Settings
from ..tasks.base import Provenance, Task
from .cache import Cache
from .fates import START, Fate, Fates
from .readers import Reader
from .requests import ContextFit, Prepared, Requests, structured_call
from .threads import LoopThread, SerialThread, fail, settle
from .window import CONTROL_INTERVAL_S, JobQueue, Window

RESULT = "result:"  # a kept result's entry in the cache's documents store (``Batcher.keep``)


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


class Batcher:
    """The core every front door shares: keys, cache hits, the queue and its workers, the engine's
    one start, results, and the sync facade. The engine says how many requests it may hold and how
    long one may go without a sign of life (``stall_s``); ``request_timeout`` overrides the latter."""

    def __init__(self, engine: Engine, cache: Cache, *, params: SamplingParams | None = None,
                 window_ms: float = 20.0, text_tokens: int = 1500, output_retries: int = 1,
                 request_timeout: float | None = None, own_engine: bool = False):
        self.engine = engine
        self.own_engine = own_engine
        self.params = params or SamplingParams()
        self.collect_s = window_ms / 1000
        self.learned: Started = engine.started()  # what the engine knows before it starts; its start's value after
        self._engine_said = engine.model_id  # the engine's own model attribute when it started (a change: a switch)
        self.window = self._window()
        self.output_retries = output_retries
        self.request_timeout = request_timeout if request_timeout is not None else engine.stall_s
        self.stats = BatcherStats()
        self._lock = threading.Lock()  # stats
        self._timed_out: set[str] = set()  # the requests that timed out (a request retried counts once)
        self.loop = LoopThread("xladdin-batcher")
        self.fates = Fates()  # every request's one future, by its input and its key; the engine's start's
        self._running: set[asyncio.Task] = set()  # the requests' coroutines on the loop (held: the loop holds none)
        self.queue: JobQueue | None = None  # made on the loop, when the engine has started
        self._workers: list[asyncio.Task] = []
        self._in_engine = 0
        self._n_workers = 0
        self.peak_in_engine = 0
        self.last_answer = 0.0  # when a request last settled (monotonic)
        self.cache = cache
        self.disk = SerialThread()  # every read and write of the answers, in order (``_from_cache``, ``_flush``)
        # a request's CPU work off the loop: a result made from its answer (a hit's, an engine's), a request
        # asked before the start prepared, a report row's input parsed
        self.rows = SerialThread("xladdin-rows")
        # answers to store, taken together by the next ``_flush`` on the disk thread (one transaction)
        self._writes: list[tuple[str, dict[str, Any], concurrent.futures.Future]] = []
        self._writes_lock = threading.Lock()
        self._kept: list[tuple[str, Any]] = []  # results to keep (``keep``), written by the next ``_flush_kept``
        self._closing = False  # ``close`` is stopping the loop and the disk thread
        self._closing_lock = threading.Lock()  # a request reaches the loop before ``close`` begins, or not at all
        self.context = ContextFit(engine, cache, self.params.max_tokens, text_tokens, disk=self.disk,
                                  learned=lambda: self.learned)
        self.requests = Requests(lambda: self.learned, self.params, self.context)
        self.reader = Reader(cache, disk=self.disk)  # report files, read once in reader processes (started when needed)

    @classmethod
    def from_settings(cls, settings: Settings, engine: Engine | None = None, *,
                      own_engine: bool | None = None) -> Batcher:
        """The core ``settings`` give; an ``engine`` given is closed with it only when ``own_engine``."""
        cache = Cache(settings.cache_dir, enabled=not settings.no_cache)
        own = engine is None if own_engine is None else own_engine
        engine = engine or build_engine(settings)
        batcher = cls(engine, cache, params=settings.sampling, window_ms=settings.batch_window_ms,
                      text_tokens=settings.text_tokens, own_engine=own)
        batcher.reader.processes = settings.readers or batcher.reader.processes
        batcher.reader.memory_mib = settings.reader_memory_mib
        return batcher

    # ---------------------------------------------------------------- lifecycle
    @property
    def ready(self) -> bool:
        """The engine has started and named its model: requests can be keyed and answered."""
        return bool(self.learned.model_id and self._workers)

    def start(self) -> None:
        """Start the loop thread and the engine, and wait for it (idempotent, thread-safe).

        An engine that cannot start (offline, timing out) raises its ``EngineError``, and a
        recent failure is raised at once (the start's fate, kept for its time: ``fates.START``)."""
        self.starting().result()

    def starting(self) -> concurrent.futures.Future:
        """The engine's start, begun and not waited for: its fate in the table (one start, however many ask;
        its failure the answer for its time), done once the engine has started."""
        if self.ready:
            return _STARTED
        fate, new = self.fates.claim(START)
        if new:
            self.run_on_loop(fate, self._astart())
        return fate

    def _start_failed(self) -> None:
        """Raise the engine's failure to start while its time lasts."""
        fate = self.fates.get(START)
        if fate is not None and fate.done() and fate.exception() is not None:
            raise fate.exception()  # type: ignore[misc]

    async def _start_engine(self) -> None:
        """Start the engine; an offline server seen before is known by the model id it had, so the
        answers already cached for it are still served (misses report the engine offline). The side
        store is read and written on the disk thread, as the answers are."""
        url = self.engine.server_url
        try:
            learned = await self.engine.start()
        except EngineOffline:
            remembered = await self.disk.run(self.cache.get_meta, f"model@{url}") if url else None
            if not remembered:
                raise
            self.learned = replace(self.engine.started(), model_id=remembered)
            self._engine_said = self.engine.model_id
        else:
            self.learned = self._learned(learned)
            self._engine_said = self.engine.model_id
            if url:
                await self.disk.run(self.cache.set_meta, f"model@{url}", self.learned.model_id)
        await self.context.measure()

    def _learned(self, learned: Any) -> Started:
        """What the engine's start said, the one account of it that the keys, the context's fit, the window
        and the reports read (``learned``): its value (a plugin's start that returns nothing: its
        attributes). Nothing is written back into the engine."""
        if learned is None:
            return self.engine.started()
        if not isinstance(learned, Started):
            raise ConfigError(f"{type(self.engine).__name__}.start() returned {type(learned).__name__}, not "
                              "xladdin.engine.Started (or nothing)")
        return learned

    async def _astart(self) -> None:
        if self.ready:  # started since the fate was made
            return
        await self._start_engine()
        if not self.learned.model_id:  # the model id is part of every cache key
            raise EngineError(f"{self.engine.describe()}: the engine did not name its model")
        self.window = self._window()  # the engine now knows its slots, or whether its server reports load
        self.queue = JobQueue(self.collect_s)
        self._spawn_workers()
        if self.window.adaptive:
            self._workers.append(asyncio.create_task(self._control()))

    def close(self, *, abort: bool = False) -> None:
        """Stop the report readers (a file still being read is its rows' error), the workers and (if
        owned) the engine, then the disk thread once the answers queued to it are stored. ``abort``
        (Ctrl-C) does not wait for requests the engine is still computing; every finished answer is
        cached."""

        async def _stop() -> None:
            for w in self._workers:
                w.cancel()
            # callers waiting on unanswered requests get an error; they are asked again after
            self.fates.close(XladdinError("closed before the answer arrived"))
            await asyncio.sleep(0)
            if self.own_engine:
                if abort:
                    self.engine.abort()
                await self.engine.aclose()

        with self._closing_lock:
            self._closing = True  # a read still queued that misses is that request's error, not a request asked
        try:
            try:
                self.reader.close()  # files still being read are their rows' errors
            finally:  # a reader that will not end (or a second Ctrl-C) still stops the engine and the threads
                self.loop.stop(_stop)  # no lock held: the loop thread may still be finishing requests that count stats
                self._workers = []  # ended with the loop: used again, the batcher starts the engine and them again
                self.fates.close(XladdinError("closed before the answer arrived"))  # what the loop never ran
                self.disk.close(last=self.cache.close)  # the writes queued run first; then the thread's connections
                self.rows.close()  # the hits read before the disk thread closed are finished first
        finally:
            self.reader.reopen()  # a file asked for while it closed was its row's error; from now on, read
            self._closing = False  # a batcher used again after it was closed starts its threads again
        self.cache.close()

    def __enter__(self) -> Batcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- the queue and its workers
    def _store(self, key: str, out: BaseModel) -> asyncio.Future:
        """On the loop: a validated answer, stored as it arrives: the loop's future, done once it is on disk.
        The write goes ahead of the cache reads waiting on the disk thread (its worker takes no other request
        until it is stored), and the answers that arrive while it waits are written with it, in one
        transaction (a cell's cache read waits for one write, not one each)."""
        loop = asyncio.get_running_loop()
        stored = loop.create_future()
        with self._writes_lock:
            self._writes.append((key, out.model_dump(mode="json"), stored))
            first = len(self._writes) == 1
        if first and not self.disk.post(self._flush, loop, first=True):  # ahead of the reads queued
            self._flush(loop)  # the interpreter is exiting: here
        return stored

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the disk thread: every answer waiting to be stored, stored; their workers told on ``loop``."""
        with self._writes_lock:
            writes, self._writes = self._writes, []
        try:
            self.cache.set_many([(key, value) for key, value, _ in writes])
        finally:
            with contextlib.suppress(RuntimeError):  # the loop has stopped: nobody awaits them
                loop.call_soon_threadsafe(_all_stored, [stored for _, _, stored in writes])

    async def _schedule(self, request: Prepared) -> BaseModel:
        """The validated answer to ``request``, queued for the workers."""
        assert self.queue is not None
        return await asyncio.shield(self.queue.put(request))

    def _window(self) -> Window:
        return Window.for_engine(self.learned.max_parallel, self.learned.reports_load, self.engine.parallel_limit)

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
            request = job.request
            try:
                out = await self._answer(request)
            except Exception as e:  # a bug in one row fails only that row
                if not job.future.done():
                    job.future.set_exception(row_error(e))
            else:
                # stored before it settles; shielded, so a worker cancelled by ``close`` still leaves the
                # write queued: it is stored
                await asyncio.shield(self._store(request.key, out))
                if not job.future.done():
                    job.future.set_result(out)
            finally:
                self.last_answer = time.monotonic()

    async def _answer(self, request: Prepared) -> BaseModel:
        """The engine's validated answer to ``request``, counted in the engine while it is asked (not while
        it is stored: the window and an idle engine are the engine's own)."""
        self._in_engine += 1
        self.peak_in_engine = max(self.peak_in_engine, self._in_engine)
        try:
            out = await structured_call(self.engine, request, self.params, retries=self.output_retries,
                                        asked=self._count_request)
        finally:
            self._in_engine -= 1
        if self.engine.model_id != self._engine_said:  # the engine now says it serves another model (a server
            # replaced behind it): the account follows, and what is asked from now on is keyed under it
            self._engine_said = self.engine.model_id
            self.learned = replace(self.learned, model_id=self.engine.model_id, starter=self.engine.starter)
        if self.learned.model_id != request.model:  # the key names a model that did not give this answer
            raise EngineError(f"{self.engine.describe()} answered, but the request was asked of "
                              f"{request.model}: the answer is not stored")
        return out

    def last_sign_of_life(self) -> float:
        """When the engine last answered or showed it was working (monotonic): a table's bound on waiting
        counts from here, so a slow engine that is computing is not taken for a stalled one."""
        return max(self.last_answer, self.engine.last_progress)

    def _count_request(self) -> None:
        with self._lock:
            self.stats.engine_requests += 1

    def fit(self, task: Task) -> Task:
        """``task`` with its report text sized to the engine (``request.ContextFit``)."""
        return self.context.fit(task)

    @property
    def tokens_per_char(self) -> float | None:
        return self.context.tokens_per_char


    # ---------------------------------------------------------------- keys and results
    def key(self, task: Task, inp: BaseModel) -> str:
        return self.requests.key(task, inp)

    def prepare(self, task: Task, inp: BaseModel) -> Prepared:
        """``inp``'s request, once (the engine has started: its model is in the key)."""
        return self.requests.prepare(task, inp)

    def _from_cache(self, request: Prepared) -> BaseModel | None:
        """``request``'s one read of the disk cache, on the disk thread: its validated answer, or ``None``."""
        stored = self.cache.get(request.key)
        if stored is None:
            return None
        try:
            return request.validate(stored)
        except (ValidationError, ValueError):
            return None  # written by an older schema: ask again

    def _hit(self, request: Prepared, out: BaseModel) -> Any:
        """``request``'s result from an answer stored before (the disk cache's), counted."""
        self._count_hit()
        return request.finish(out, True)

    def _count_hit(self, *, recalled: bool = False) -> None:
        """A request answered from the disk (``recalled``: by a result kept by its input)."""
        with self._lock:
            self.stats.submitted += 1
            self.stats.cache_hits += 1
            self.stats.recalled += recalled
            self.stats.completed += 1

    # ---------------------------------------------------------------- sync facade
    def lookup(self, task: Task, inp: BaseModel) -> Any | None:
        """The cached result for ``inp``, or ``None``, read on the disk thread (waited for). Never asks
        the engine."""
        self.start()
        request = self.prepare(task, inp)
        out = self.disk.submit(self._from_cache, request).result()
        return None if out is None else self._hit(request, out)

    def load(self, task: Task, inp: BaseModel, fate: Fate | None = None) -> Fate:
        """The request's fate: ``fate`` (its caller's, made for its input in the table) or a new one, or the
        fate of the same request already asked (by its key). Never waits, on the disk or the engine: its
        coroutine runs on the loop (``_request``). Prepared here when the engine has started (its model is in
        the key); before, on the rows thread once it has (the fate covers the start too, and is ``looked``
        at once: nothing is read before the start), and a recent failure to start is raised."""
        made = fate is None
        fate = Fate() if fate is None else fate
        if not self.ready:  # (never a loop, and an engine, started again by a call during ``close``)
            self._start_failed()
            fate.looked = True
            self.run_on_loop(fate, self._start_then(task, inp, fate))
            return fate
        request = self.prepare(task, inp)
        other = self._joined(request, fate)
        if other is None:
            self.run_on_loop(fate, self._request(request, fate))
        elif made:
            return other
        else:
            _follow(fate, other)
        return fate

    def run_on_loop(self, fate: Fate, asked: Coroutine[Any, Any, Any]) -> None:
        """``asked`` run on the loop as a task, its outcome set on ``fate`` there; ``fate`` given up on
        (cancelled) cancels it; the batcher closing fails it."""
        async def settling() -> None:
            try:
                result = await asked
            except asyncio.CancelledError:
                if self._closing:
                    fail(fate, XladdinError("closed before the answer arrived"))
                else:
                    fate.cancel()
                raise
            except Exception as e:  # a bug in one row fails only that row
                fail(fate, e)
            else:
                settle(fate, result)

        def begin() -> None:
            if fate.done():  # given up on before its turn
                asked.close()
                return
            task = loop.create_task(settling())
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            fate.add_done_callback(lambda f: f.cancelled() and _call_soon(loop, task.cancel))

        with self._closing_lock:  # on the loop before ``close`` stops it (which fails what it holds), or not at all
            if self._closing:
                asked.close()
                settle(fate, XladdinError("closed before the answer arrived"), error=True)
                return
            loop = self.loop.get()
            loop.call_soon_threadsafe(begin)

    async def answer(self, task: Task, inp: BaseModel, fate: Fate) -> tuple[Any, bool]:
        """On the loop: ``inp``'s result into ``fate`` (a report row's, its text read), prepared on the rows
        thread, joined to the same request already asked, else read and asked (``_asked``); and whether the
        model's answer made it."""
        request = await self.rows.run(self.prepare, task, inp)
        other = self._joined(request, fate)
        if other is not None:
            return await asyncio.wrap_future(other), False
        return await self._asked(request, fate)

    async def _start_then(self, task: Task, inp: BaseModel, fate: Fate) -> Any:
        """A request asked before the start, once the engine has started."""
        await asyncio.wrap_future(self.starting())
        result, _ = await self.answer(task, inp, fate)
        return result

    async def _request(self, request: Prepared, fate: Fate) -> Any:
        result, _ = await self._asked(request, fate)
        return result

    async def _asked(self, request: Prepared, fate: Fate) -> tuple[Any, bool]:
        """``request``'s one read of the disk cache (on the disk thread); a hit's result made on the rows
        thread; a miss asked of the engine (``_ask``), ``fate`` looked meanwhile."""
        out = await self.disk.run(self._from_cache, request)
        if out is not None:
            return await self.rows.run(self._hit, request, out), True
        self.fates.looked(fate)
        return await self._ask(request)

    def _joined(self, request: Prepared, fate: Fate) -> Fate | None:
        """``fate`` in the table under ``request``'s answer and task too (``None``: its coroutine asks it), or the
        fate of the same request asked before under another input or by another door (counted)."""
        other = self.fates.join(_same(request), fate)
        if other is None:
            fate.key = request.key
            return None
        with self._lock:
            self.stats.deduplicated += 1
        return other

    def recall(self, key: str) -> Any | None:
        """On the disk thread: the result kept under ``key`` (``keep``), counted as a cache hit, or ``None``."""
        found = self.cache.get_document(RESULT + key)
        if found is not None:
            self._count_hit(recalled=True)
        return found

    def keep(self, key: str, result: Any) -> None:
        """A result made from the model's answer kept on disk under ``key`` (a report row's input: its file by
        its stamp), as a cache hit's, written with the others that arrive meanwhile (one transaction)."""
        provenance = getattr(result, "provenance", None)
        if not isinstance(result, BaseModel) or not isinstance(provenance, Provenance):
            return
        kept = result.model_copy(update={"provenance": provenance.model_copy(update={"cached": True})})
        with self._writes_lock:
            self._kept.append((RESULT + key, kept))
            first = len(self._kept) == 1
        if first and not self.disk.post(self._flush_kept):
            self._flush_kept()

    def _flush_kept(self) -> None:
        """On the disk thread: every result waiting to be kept, kept."""
        with self._writes_lock:
            kept, self._kept = self._kept, []
        self.cache.set_documents(kept)

    def submit(self, task: Task, inp: BaseModel) -> concurrent.futures.Future:
        """The request's fate (``load``)."""
        return self.load(task, inp)

    def run(self, task: Task, inp: BaseModel) -> Any:
        """Blocking single request; raises ``XladdinError``."""
        try:
            return self.submit(task, inp).result(self.request_timeout)
        except concurrent.futures.TimeoutError:
            raise EngineStalled(f"no answer within {self.request_timeout:g}s ({self.engine.describe()})") from None

    def count_timed_out(self, keys: Iterable[str]) -> None:
        """The requests (by key) given up on by a table's bound (the engine stalled), or that timed out in
        the engine: ``stats.timed_out`` counts each once, however often it was tried."""
        with self._lock:
            self._timed_out.update(keys)
            self.stats.timed_out = len(self._timed_out)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            data = asdict(self.stats)
        q = self.queue
        data.update(queued=len(q.jobs) if q else 0, in_flight=(len(q.jobs) + self._in_engine) if q else 0,
                    waves=q.waves if q else 0,
                    max_parallel=self.window.limit, peak_in_engine=self.peak_in_engine,
                    model=self.learned.model_id)
        return data

    # ---------------------------------------------------------------- async core
    async def _ask(self, request: Prepared) -> tuple[Any, bool]:
        """``request``, a miss of its one read of the disk cache, queued for the engine. Its result, and
        whether it was made from the model's answer (not code's alone, ``Prepared.alone``)."""
        with self._lock:
            self.stats.submitted += 1
        try:
            out = await self._schedule(request)
        except XladdinError as e:
            alone = await self.rows.run(request.alone, e)
            if isinstance(e, EngineTimeout):
                self.count_timed_out((request.key,))
            with self._lock:
                self.stats.last_error = str(e)
                if alone is None:
                    self.stats.failed += 1
                else:
                    self.stats.completed += 1
                    self.stats.without_answer += 1
            if alone is None:
                raise
            return alone, False
        with self._lock:
            self.stats.completed += 1
        return await self.rows.run(request.finish, out, False), True


_STARTED: concurrent.futures.Future = concurrent.futures.Future()  # a started engine's start
_STARTED.set_result(None)


def _all_stored(stored: list[asyncio.Future]) -> None:
    for done in stored:
        if not done.done():
            done.set_result(None)


def _same(request: Prepared) -> tuple[str, Any]:
    """What makes two requests one: the same answer (its cache key) made into a result by the same task (its
    rules: the same answer under other rules is another result)."""
    return request.key, request.task.identity()


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> None:
    try:
        loop.call_soon_threadsafe(fn)
    except RuntimeError:  # the loop has stopped (closed): nothing runs there any more
        pass


def _follow(fate: Fate, other: concurrent.futures.Future) -> None:
    """``fate`` settled as ``other`` is (the same request, asked first under another input)."""

    def copy(done: concurrent.futures.Future) -> None:
        if done.cancelled():
            fate.cancel()
        elif done.exception() is not None:
            settle(fate, done.exception(), error=True)
        else:
            settle(fate, done.result())

    other.add_done_callback(copy)
