"""One request: its report text sized to the engine's context, prepared once where it is made, and asked.

**Sized** (``ContextFit``): how much report text one request may carry is the engine's context
(vLLM's ``max_model_len``, the embedded ``n_ctx``) less the answer budget, the system prompt (and the
schema when it goes into the prompt) and the row's other fields; at most the ``text_tokens`` setting.
Characters per token are counted by the engine once per model and remembered in the cache's side store.

**Prepared** (``Requests.prepare``, from ``Batcher.prepare``): everything the rest of its way needs travels
with it, as data (``Prepared``): the messages and the schema sent, the key and the model it was asked
under, and the fitted task with the parsed input, whose ``validate``, ``finish`` and ``alone`` are the
request's own methods. The batcher, the structured call and the cache use these and never hold the task
apart from its request; an answer is stored only under ``key``, and only when the engine still serves
``model``.

**Asked** (``structured_call``): the engine's answer is validated, and when it does not match it is asked
once more *with the validation error* in the messages (the same request at temperature 0 with the same
seed could only get the same answer). What code can mend, the request's validator mends (the task's
``repair``) before validation; what is still wrong is a typed ``OutputError``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..engine import Engine, SamplingParams, Started
from ..errors import Attempt, EngineRejected, EngineTimeout, OutputError, RetryError, XladdinError, first_error
from ..tasks.base import Provenance, Task
from .cache import Cache, cache_key
from .threads import SerialThread

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
