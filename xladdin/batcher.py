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
import json
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel, ValidationError

from .cache import Cache, cache_key
from .engine import Engine, SamplingParams, build_engine
from .errors import EngineOffline, EngineRejected, EngineTimeout, OutputError, XladdinError
from .scheduler import Scheduler
from .settings import Settings
from .tasks.base import Provenance, Task

ALONE_ROWS = 10_000  # results without a model answer kept in memory
# Errors after which a task may still give what code alone can (``Task.without_answer``): the model's
# answer failed, the engine took too long, or it refused this request (too long). An engine that
# cannot be reached or is misconfigured stays an error.
NO_ANSWER_ERRORS = (OutputError, EngineTimeout, EngineRejected)
# Sizing the report text to the engine's context (``fit``): a sample of report prose measured in the
# model's own tokens once per model, the row's other fields and the chat template, a safety margin.
TOKEN_SAMPLE = ("2019年公司实现营业收入1,175,301,034.32元，同比下降4.49%；归属于上市公司股东的净利润129,465,020.68元，"
                "同比下降28.95%。报告期内，公司坚持以市场为导向，加快产品结构调整，冷链装备业务保持稳定，"
                "罐式集装箱业务受国际贸易环境影响有所下滑。Revenue and net profit, EPS 0.62, ROE 7.64%.")  # fmt: skip
ROW_TOKENS = 256
DEFAULT_TOKENS_PER_CHAR = 1.0  # an engine that cannot count: more than Qwen's ~0.7 for Chinese text
DEFAULT_CONTEXT = 4096


@functools.lru_cache(maxsize=64)
def _provenance(model: str, task_version: str, cached: bool) -> Provenance:
    return Provenance(model=model, task_version=task_version, cached=cached)


class Batcher(Scheduler):
    """The scheduler with the cache in front: keys, cache hits, results, and the sync facade."""

    def __init__(self, engine: Engine, cache: Cache, *, text_tokens: int = 1500, **options: Any):
        super().__init__(engine, **options)
        self.cache = cache
        # Results given without a model answer (``Task.without_answer``) never go to the disk; they
        # are kept for this process, by request key, so that a sheet recalculating the cell does not
        # ask the model again in a loop. A new process asks again.
        self._alone: dict[str, Any] = {}
        self.text_tokens = text_tokens
        self.tokens_per_char: float | None = None  # measured when the engine has started
        self._fitted: dict[Any, Task] = {}

    @classmethod
    def from_settings(cls, settings: Settings, engine: Engine | None = None) -> Batcher:
        cache = Cache(settings.cache_dir, enabled=not settings.no_cache)
        own = engine is None
        engine = engine or build_engine(settings)
        params = SamplingParams(temperature=settings.temperature, seed=settings.seed, max_tokens=settings.max_tokens)
        timeout = settings.timeout * (settings.retries + 1) + 5
        return cls(engine, cache, params=params, window_ms=settings.batch_window_ms, text_tokens=settings.text_tokens,
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
        await self._measure_tokens()

    async def _measure_tokens(self) -> None:
        """Tokens per character of report prose in this model's tokenizer: counted by the engine once
        per model and remembered in the cache's side store (so a cached run never loads weights for it)."""
        meta = f"tokens_per_char@{self.engine.model_id}"
        known = self.cache.get_meta(meta)
        if isinstance(known, float):
            self.tokens_per_char = known
            return
        try:
            counted = await self.engine.count_tokens(TOKEN_SAMPLE)
        except XladdinError:
            counted = None
        if counted:
            self.tokens_per_char = counted / len(TOKEN_SAMPLE)
            self.cache.set_meta(meta, self.tokens_per_char)

    def fit(self, task: Task) -> Task:
        """``task`` with its report text sized to the engine: the context (vLLM's ``max_model_len``,
        the embedded ``n_ctx``) less the answer budget, the system prompt (and the schema when it goes
        into the prompt) and the row's other fields, counted in the model's tokens; at most
        ``text_tokens``."""
        fitted = self._fitted.get(task.identity())
        if fitted is not None:
            return fitted
        if not self.engine.model_id:  # not started: nothing measured yet
            return task
        per_char = self.tokens_per_char or DEFAULT_TOKENS_PER_CHAR
        context = self.engine.context_tokens or DEFAULT_CONTEXT
        prompt_chars = len(getattr(task, "system", "") or "")
        if not getattr(getattr(self.engine, "options", None), "structured_output", True):
            prompt_chars += len(json.dumps(task.schema, ensure_ascii=False))
        room = context - self.params.max_tokens - ROW_TOKENS - int(prompt_chars * per_char * 1.1)
        tokens = min(self.text_tokens, room)
        fitted = task.fitted(max(100, int(tokens / (per_char * 1.1))))
        if len(self._fitted) > 256:
            self._fitted.clear()
        self._fitted[task.identity()] = fitted
        return fitted

    def _store(self, key: str, out: BaseModel) -> None:
        self.cache.set(key, out.model_dump(mode="json"))

    def _closed(self) -> None:
        self.cache.close()

    def __enter__(self) -> Batcher:
        return self

    # ---------------------------------------------------------------- keys and results
    def key(self, task: Task, inp: BaseModel) -> str:
        return cache_key(task=task.name, task_version=task.version, task_config=self.fit(task).key_config(inp),
                         model=self.engine.model_id, params=self._params_dump, inp=inp)  # fmt: skip

    @functools.cached_property
    def _params_dump(self) -> dict[str, Any]:
        return self.params.model_dump()

    def _result(self, task: Task, inp: BaseModel, out: BaseModel, cached: bool) -> Any:
        return self.fit(task).finish(inp, out, _provenance(self.engine.model_id, task.version, cached))

    def without_answer(self, task: Task, inp: BaseModel, error: XladdinError) -> Any | None:
        """What code alone gives for ``inp`` after ``error`` (``None``: the row is the error)."""
        if not isinstance(error, NO_ANSWER_ERRORS):
            return None
        return self.fit(task).without_answer(inp, error, _provenance(self.engine.model_id, task.version, False))

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
            out = await self._schedule(key, self.fit(task), inp)
        except XladdinError as e:
            alone = self.without_answer(task, inp, e)
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
