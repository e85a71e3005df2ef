"""When requests reach the engine, and what never needs to: one class, ``Batcher``; and one request sized,
prepared and asked (``ContextFit``, ``Requests``, ``structured_call``: below).

A thread-safe sync facade serves the ``Resolver`` (every front door: Excel, the CLI, Refresh,
pandas); its asyncio core runs on a loop thread of its own (``cache.LoopThread``), and the disk cache is
read and written on a thread of its own (``cache.SerialThread``): never on a caller's (a cell's)
thread, never on the loop that drives the engine's requests. A request is

1. prepared on the caller's thread and read from the cache once, on the disk thread: a hit's result is
   made on the rows thread and settles its ticket there (no queue, no event loop round trip); a caller
   may wait a bounded time for that read (``Ticket.read``, done once the hit's ticket is settled: a
   reopened workbook's cells get their values at once), never for the engine;
2. otherwise handed to the loop and queued (``JobQueue``: joined to an identical request
   queued or in flight, or answered from the answers stored lately, ``RECENT``): a caller never
   waits for the engine to start, before it has the ticket covers the start.
   Workers, one per request the engine may hold (``Window``, below: what the engine says, a
   limit the user set in its options, or a window adapted to a GPU server's load), take the queue
   longest prompt first after a short window that lets a burst of cells arrive (one wave); the
   engine is never given more and never left idle while work is queued.

Each answer goes through one ``structured_call`` (validated, re-asked once with the error), is
stored in the cache the moment it arrives (on the disk thread, awaited before its ticket settles;
only while the engine still serves the request's model) and turned into the task's result on the
rows thread; a failing request fails only its own ticket. How long a request may go without a sign of life is
the engine's to say (``Engine.stall_s``).

**How many requests the batcher keeps in the engine at once** (``Window``). An embedded engine has a fixed
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
import collections
import concurrent.futures
import contextlib
import functools
import heapq
import itertools
import json
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ValidationError

from ..engine import Engine, SamplingParams, Started, build_engine
from ..errors import (
    Attempt,
    ConfigError,
    EngineError,
    EngineOffline,
    EngineRejected,
    EngineStalled,
    EngineTimeout,
    OutputError,
    RetryError,
    XladdinError,
    first_error,
    row_error,
)
from ..settings import Settings
from ..tasks.base import Provenance, Task
from .cache import Cache, LoopThread, SerialThread, SharedStart, Ticket, cache_key, fail, settle
from .readers import Reader

RECENT = 4096  # answers stored lately, kept in memory by key (``Batcher._ask``)
RESULT = "result:"  # a kept result's entry in the cache's documents store (``Batcher.keep``)


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
        self.shared_start = SharedStart(self._astart)
        self.queue: JobQueue | None = None  # made on the loop, when the engine has started
        self._workers: list[asyncio.Task] = []
        self._in_engine = 0
        self._n_workers = 0
        self.peak_in_engine = 0
        self.last_answer = 0.0  # when a request last settled (monotonic)
        self.cache = cache
        self.disk = SerialThread()  # every read and write of the answers, in order (``_from_cache``, ``_flush``)
        # a request's work off its caller's thread, the disk thread and the loop: a result made from its
        # answer (a hit's, ``_finish_hit``; an engine's, ``_ask``), a request asked before the start prepared
        self.rows = SerialThread("xladdin-rows")
        # answers to store, taken together by the next ``_flush`` on the disk thread (one transaction)
        self._writes: list[tuple[str, dict[str, Any], concurrent.futures.Future]] = []
        self._writes_lock = threading.Lock()
        # key → validated answer, of the last RECENT stored (on the loop thread, by the workers): ``_ask``
        self._recent: collections.OrderedDict[str, BaseModel] = collections.OrderedDict()
        self._kept: list[tuple[str, Any]] = []  # results to keep (``keep``), written by the next ``_flush_kept``
        self._closing = False  # ``close`` is stopping the loop and the disk thread (``_read``)
        self._closing_lock = threading.Lock()  # a miss is handed to the loop before ``close`` begins, or not at all
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
        recent failure is raised at once (``lifecycle.SharedStart``)."""
        self.starting().result()

    def starting(self) -> concurrent.futures.Future:
        """The start of ``start``, begun and not waited for: a future, done once the engine has started
        (its exception the start's failure, a recent one at once)."""
        if self.ready:
            started: concurrent.futures.Future = concurrent.futures.Future()
            started.set_result(None)
            return started
        self.loop.get()
        try:
            self.shared_start.raise_recent_failure()
        except XladdinError as e:
            failed: concurrent.futures.Future = concurrent.futures.Future()
            failed.set_exception(e)
            return failed
        return self.loop.submit(self._ensure_started())

    async def _ensure_started(self) -> None:
        if not self.ready:
            await self.shared_start()

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
            if self.queue is not None:  # callers waiting on unanswered requests get an error
                self.queue.fail_all(XladdinError("closed before the answer arrived"))
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
    def _store(self, key: str, out: BaseModel) -> concurrent.futures.Future:
        """A validated answer, stored as it arrives: done once it is on disk. The write goes ahead of the
        cache reads waiting on the disk thread (its worker takes no other request until it is stored), and
        the answers that arrive while it waits are written with it, in one transaction (a cell's cache
        read waits for one write, not one each)."""
        stored: concurrent.futures.Future = concurrent.futures.Future()
        with self._writes_lock:
            self._writes.append((key, out.model_dump(mode="json"), stored))
            first = len(self._writes) == 1
        if first:
            self.disk.submit(self._flush, first=True)  # ahead of the reads queued: a worker waits for it
        return stored

    def _flush(self) -> None:
        """On the disk thread: every answer waiting to be stored, stored."""
        with self._writes_lock:
            writes, self._writes = self._writes, []
        try:
            self.cache.set_many([(key, value) for key, value, _ in writes])
        finally:
            for _, _, stored in writes:
                stored.set_result(None)

    def _remember(self, key: str, out: BaseModel) -> None:
        """A stored answer, kept in memory among the last ``RECENT`` (on the loop thread)."""
        self._recent[key] = out
        self._recent.move_to_end(key)
        if len(self._recent) > RECENT:
            self._recent.popitem(last=False)

    async def _schedule(self, request: Prepared) -> BaseModel:
        """The validated answer to ``request``: joins the request in flight, or queues a new one."""
        assert self.queue is not None
        fut, joined = self.queue.put(request)
        if joined:
            with self._lock:
                self.stats.deduplicated += 1
        return await asyncio.shield(fut)

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
                job.future.set_exception(row_error(e))
            else:
                # stored before it settles and leaves ``inflight`` (``_ask`` relies on it); shielded, so a
                # worker cancelled by ``close`` still leaves the write queued: it is stored
                await asyncio.shield(asyncio.wrap_future(self._store(request.key, out)))
                self._remember(request.key, out)
                job.future.set_result(out)
            finally:
                self.queue.inflight.pop(request.key, None)
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
            self.learned = replace(self.learned, model_id=self.engine.model_id)
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
        """``request``'s result from an answer stored before (the disk cache's, or one of ``_recent``), counted."""
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

    def resolve(self, task: Task, inp: BaseModel, ticket: Ticket | None = None) -> Ticket:
        """The request's ticket (``ticket``, the one its caller made for its input, or a new one): the one
        future its outcome is set on, by its disk read (a hit) or on the loop (the engine's answer); never
        waits, on the disk or the engine.

        The request is prepared here and read on the disk thread, which hands a hit to the rows thread
        (``_finish_hit``) or a miss to the loop (``_ask``); the ticket's ``read`` is done once the hit has
        settled the ticket or the miss has gone to the engine (a caller may wait for it, bounded). Before the
        engine has started (loading a model, reaching a server that may hang) the ticket covers the start
        too, and a recent failure to start is raised. What becomes of the ticket's result is the caller's
        to keep (``Resolver``): nothing here remembers it but the disk cache and the answers stored lately."""
        ticket = Ticket() if ticket is None else ticket
        if not self.ready:
            with self._closing_lock:  # never a loop (and an engine) started again by a call during ``close``
                if self._closing:
                    settle(ticket, XladdinError("closed before the answer arrived"), error=True)
                    ticket.read_done()
                    return ticket
                self.loop.get()
                self.shared_start.raise_recent_failure()
                self._on_loop(ticket, self._start_then_ask(task, inp))
            ticket.read_done()  # nothing read yet: the read follows the start, on the loop's account
            return ticket
        request = self.prepare(task, inp)
        ticket.key = request.key
        if ticket.read is None:
            ticket.read = concurrent.futures.Future()
        self.disk.submit(self._read, request, ticket)
        return ticket

    def _on_loop(self, ticket: Ticket, asked: Coroutine[Any, Any, tuple[Any, bool]]) -> None:
        """``asked`` run on the loop, its outcome set on ``ticket`` there (its result, and whether the model's
        answer made it); ``ticket`` given up on (cancelled) cancels it."""

        async def settling() -> None:
            try:
                result, answered = await asked
            except asyncio.CancelledError:
                ticket.cancel()
                raise
            except Exception as e:  # a bug in one row fails only that row
                fail(ticket, e)
            else:
                ticket.answered = answered
                settle(ticket, result)

        running = self.loop.submit(settling())
        ticket.add_done_callback(lambda t: t.cancelled() and running.cancel())

    def _read(self, request: Prepared, ticket: Ticket) -> None:
        """On the disk thread: ``request``'s one read of the cache. A hit goes to the rows thread, which
        settles ``ticket`` and then does its ``read``; a miss is handed to the loop, whose outcome settles
        ``ticket`` (its cancellation cancels the request's wait there), its ``read`` done here."""
        finishing = False
        try:
            if ticket.cancelled():  # given up on before its turn (a table's bound)
                return
            out = self._from_cache(request)
            if out is None:
                with self._closing_lock:  # on the loop before ``close`` stops it (and fails what it holds)
                    if self._closing:  # its loop has stopped: no worker would ever take it
                        raise XladdinError("closed before the answer arrived")
                    self._on_loop(ticket, self._ask(request))
                return
            self.rows.submit(self._finish_hit, request, out, ticket)  # its read done there, once settled
            finishing = True
        except Exception as e:  # a bug in one row fails only that row
            fail(ticket, e)
        finally:
            if not finishing:
                ticket.read_done()

    def _finish_hit(self, request: Prepared, out: BaseModel, ticket: Ticket) -> None:
        """On the rows thread: a hit's result made from its stored answer and set on ``ticket``, then its
        ``read`` done (a caller waiting for the read finds the ticket settled)."""
        try:
            result = self._hit(request, out)
        except Exception as e:  # a bug in one row fails only that row
            fail(ticket, e)
        else:
            ticket.answered = True
            settle(ticket, result)
        finally:
            ticket.read_done()

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
        if first:
            self.disk.submit(self._flush_kept)

    def _flush_kept(self) -> None:
        """On the disk thread: every result waiting to be kept, kept."""
        with self._writes_lock:
            kept, self._kept = self._kept, []
        self.cache.set_documents(kept)

    def submit(self, task: Task, inp: BaseModel) -> concurrent.futures.Future:
        """A future of the task's result (``resolve``: a cache hit's is settled by its read, on the disk
        thread)."""
        return self.resolve(task, inp)

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
        data.update(queued=len(q.jobs) if q else 0, in_flight=len(q.inflight) if q else 0, waves=q.waves if q else 0,
                    max_parallel=self.window.limit, peak_in_engine=self.peak_in_engine,
                    model=self.learned.model_id)
        return data

    # ---------------------------------------------------------------- async core
    async def _start_then_ask(self, task: Task, inp: BaseModel) -> tuple[Any, bool]:
        """A request asked before the start, once the engine has started: prepared (keyed now the engine has
        named its model) and finished on the rows thread, read on the disk thread. Not on the loop: a table's
        rows that waited for the start would each be prepared there in turn, and no answer or request would
        move until the last was."""
        await self._ensure_started()
        request = await self.rows.run(self.prepare, task, inp)
        out = await self.disk.run(self._from_cache, request)
        if out is not None:
            return await self.rows.run(self._hit, request, out), True
        return await self._ask(request)

    async def _ask(self, request: Prepared) -> tuple[Any, bool]:
        """``request``, a miss of its one read of the disk cache: joined to the same request in flight,
        answered from the answers stored lately, or queued. Its result, and whether it was made from the
        model's answer (not code's alone, ``Prepared.alone``).

        An identical request (from another thread) may have been answered and stored between this one's
        miss and now. Reads and writes run in order on the one disk thread, so this miss was read before
        that answer's write ran; its worker awaits the write, and only then, in one step on this loop, keeps
        the answer in ``_recent`` and takes its key out of ``queue.inflight``. So here the key is in flight
        (joined) or in ``_recent`` (answered from memory), unless it was never asked, or more than
        ``RECENT`` answers were stored since (then at worst it is asked again). The disk is not read again."""
        if self.queue is None or request.key not in self.queue.inflight:
            out = self._recent.get(request.key)
            if out is not None:
                return await self.rows.run(self._hit, request, out), True
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


# One request: its report text sized to the engine's context, prepared once where it is made, and asked.
#
# **Sized** (``ContextFit``): how much report text one request may carry is the engine's context
# (vLLM's ``max_model_len``, the embedded ``n_ctx``) less the answer budget, the system prompt (and the
# schema when it goes into the prompt) and the row's other fields; at most the ``text_tokens`` setting.
# Characters per token are counted by the engine once per model and remembered in the cache's side store.
#
# **Prepared** (``Requests.prepare``, from ``Batcher.prepare``): everything the rest of its way needs travels
# with it, as data (``Prepared``): the messages and the schema sent, the key and the model it was asked
# under, and the fitted task with the parsed input, whose ``validate``, ``finish`` and ``alone`` are the
# request's own methods. The batcher, the structured call and the cache use these and never hold the task
# apart from its request; an answer is stored only under ``key``, and only when the engine still serves
# ``model``.
#
# **Asked** (``structured_call``): the engine's answer is validated, and when it does not match it is asked
# once more *with the validation error* in the messages (the same request at temperature 0 with the same
# seed could only get the same answer). What code can mend, the request's validator mends (the task's
# ``repair``) before validation; what is still wrong is a typed ``OutputError``.

# Sizing the report text to the engine's context (``fit``): a sample of report prose measured in the
# model's own tokens once per model, the row's other fields and the chat template, a safety margin.
TOKEN_SAMPLE = ("2019年公司实现营业收入1,175,301,034.32元，同比下降4.49%；归属于上市公司股东的净利润129,465,020.68元，"
                "同比下降28.95%。报告期内，公司坚持以市场为导向，加快产品结构调整，冷链装备业务保持稳定，"
                "罐式集装箱业务受国际贸易环境影响有所下滑。Revenue and net profit, EPS 0.62, ROE 7.64%.")
ROW_TOKENS = 256
DEFAULT_TOKENS_PER_CHAR = 1.0  # an engine that cannot count: more than Qwen's ~0.7 for Chinese text
DEFAULT_CONTEXT = 4096


class ContextFit:
    """Tasks sized to one engine's context (``fit``), from the tokens per character measured once."""

    def __init__(self, engine: Engine, cache: Cache, max_tokens: int, text_tokens: int, *,
                 disk: SerialThread | None = None, learned: Callable[[], Started] | None = None):
        """``disk``: the thread the side store is read and written on (a batcher's), else the caller's;
        ``learned``: what the engine's start learned (``Batcher.learned``; else the engine's own word)."""
        self.engine = engine
        self.learned = learned or engine.started
        self.cache = cache
        self.disk = disk
        self.max_tokens = max_tokens
        self.text_tokens = text_tokens
        self.tokens_per_char: float | None = None  # measured when the engine has started
        self._fitted: dict[Any, Task] = {}

    async def measure(self) -> None:
        """Tokens per character of report prose in this model's tokenizer: counted by the engine once
        per model and remembered in the cache's side store (so a cached run never loads weights for it)."""
        meta = f"tokens_per_char@{self.learned().model_id}"
        known = await self._side(self.cache.get_meta, meta)
        if isinstance(known, float):
            self.tokens_per_char = known
            return
        try:
            counted = await self.engine.count_tokens(TOKEN_SAMPLE)
        except XladdinError:
            counted = None
        if counted:
            self.tokens_per_char = counted / len(TOKEN_SAMPLE)
            await self._side(self.cache.set_meta, meta, self.tokens_per_char)

    async def _side(self, fn: Any, *args: Any) -> Any:
        return fn(*args) if self.disk is None else await self.disk.run(fn, *args)

    def fit(self, task: Task) -> Task:
        """``task`` with its report text sized to the engine: the context (vLLM's ``max_model_len``,
        the embedded ``n_ctx``) less the answer budget, the system prompt (and the schema when it goes
        into the prompt) and the row's other fields, counted in the model's tokens; at most
        ``text_tokens``."""
        fitted = self._fitted.get(task.identity())
        if fitted is not None:
            return fitted
        learned = self.learned()
        if not learned.model_id:  # not started: nothing measured yet
            return task
        per_char = self.tokens_per_char or DEFAULT_TOKENS_PER_CHAR
        context = learned.context_tokens or DEFAULT_CONTEXT
        prompt_chars = len(getattr(task, "system", "") or "")
        if not self.engine.structured_output:
            prompt_chars += len(json.dumps(task.schema, ensure_ascii=False))
        room = context - self.max_tokens - ROW_TOKENS - int(prompt_chars * per_char * 1.1)
        tokens = min(self.text_tokens, room)
        fitted = task.fitted(max(100, int(tokens / (per_char * 1.1))))
        if len(self._fitted) > 256:
            self._fitted.clear()
        self._fitted[task.identity()] = fitted
        return fitted


# Errors after which a task may still give what code alone can (``Task.without_answer``): the model's
# answer failed, the engine took too long, or it refused this request (too long). An engine that
# cannot be reached or is misconfigured stays an error.
NO_ANSWER_ERRORS = (OutputError, EngineTimeout, EngineRejected)


@dataclass(frozen=True, slots=True, eq=False)
class Prepared:
    """A request as data: what is sent, the key and model it is asked under, and the task (sized to the
    engine's context) with the parsed input that validate and finish its answer. Its methods are the
    only calls into the task after it is made; a ``Prepared`` pickles with its task and input (a Ray
    job's actors pass them)."""

    key: str  # the cache key it was asked under
    model: str  # the model id in that key
    messages: list[dict[str, str]]
    schema: dict[str, Any]  # the JSON schema sent for this row
    task: Task  # the task as fitted to the engine's context
    inp: BaseModel  # the parsed input

    @property
    def length(self) -> int:
        """Characters sent: the queue takes the longest first."""
        return sum(len(m["content"]) for m in self.messages)

    def validate(self, data: str | dict[str, Any]) -> BaseModel:
        """The answer (JSON text, or a dict from the cache) validated for this row; raises ``ValueError``."""
        return self.task.validate_output(data, self.inp)

    def finish(self, out: BaseModel, cached: bool) -> Any:
        """The row's result from its validated answer."""
        return self.task.finish(self.inp, out, _provenance(self.model, self.task.version, cached))

    def alone(self, error: XladdinError) -> Any | None:
        """What code alone gives after ``error`` (``None``: the error is the row's result)."""
        if not isinstance(error, NO_ANSWER_ERRORS):
            return None
        return self.task.without_answer(self.inp, error, _provenance(self.model, self.task.version, False))


class Requests:
    """How a row becomes its prepared request on one engine: the task sized to the engine's context,
    the key (task, version, what changes the prompt, model, sampling, input) and the result makers."""

    def __init__(self, learned: Callable[[], Started], params: SamplingParams, context: ContextFit):
        """``learned``: what the engine's start learned (``Batcher.learned``): the model its keys name."""
        self.learned, self.params, self.context = learned, params, context
        self._params = params.model_dump()

    def key(self, task: Task, inp: BaseModel) -> str:
        return self._key(self.context.fit(task), inp)

    def _key(self, fitted: Task, inp: BaseModel) -> str:
        return cache_key(task=fitted.name, task_version=fitted.version, task_config=fitted.key_config(inp),
                         model=self.learned().model_id, params=self._params, inp=inp)

    def prepare(self, task: Task, inp: BaseModel) -> Prepared:
        fitted = self.context.fit(task)
        return Prepared(key=self._key(fitted, inp), model=self.learned().model_id, messages=fitted.messages(inp),
                        schema=fitted.schema_for(inp), task=fitted, inp=inp)


@functools.lru_cache(maxsize=64)
def _provenance(model: str, task_version: str, cached: bool) -> Provenance:
    return Provenance(model=model, task_version=task_version, cached=cached)


async def structured_call(engine: Engine, request: Prepared, params: SamplingParams, *, retries: int = 1,
                          asked: Callable[[], Any] | None = None) -> BaseModel:
    """The validated answer; ``asked`` is called before each request to the engine. An answer still
    not valid after ``retries`` more asks is a ``RetryError`` keeping every answer and its fault."""
    messages = sent = request.messages
    attempts: list[Attempt] = []
    last: OutputError | None = None
    for _ in range(1 + retries):
        if asked:
            asked()
        text = ""
        try:
            text = await engine.complete(sent, request.schema, params)
            return request.validate(text)
        except OutputError as e:  # e.g. cut at max_tokens
            last = e
            text = e.answer or text
        except (ValidationError, ValueError) as e:
            last = OutputError(f"model answer does not match the schema: {first_error(e)}", answer=text)
        attempts.append(Attempt(text, str(last)))
        sent = ask_again(messages, text, last)
    assert last is not None
    if len(attempts) == 1:
        raise last
    raise RetryError(str(last), attempts=tuple(attempts))


def ask_again(messages: list[dict[str, str]], text: str, fault: Exception) -> list[dict[str, str]]:
    """The messages that ask once more: the answer given and its fault, to be corrected."""
    fix = f"这个回答不符合要求（{fault}）。请改正，只输出符合 JSON Schema 的 JSON。"
    return [*messages, {"role": "assistant", "content": text[:2000]}, {"role": "user", "content": fix}]
