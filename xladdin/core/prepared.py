"""One request, prepared once where it is made (``Batcher.prepare``).

Everything the rest of its way needs travels with it: the messages and the schema sent, the
validator of the answer and the finisher that turns it into the result, what code alone gives
without an answer, and the key and the model it was asked under. The batcher, the structured
call and the cache use these and never call back into the task; an answer is stored only under
``key``, and only when the engine still serves ``model``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..engine import Engine, SamplingParams
from ..errors import EngineRejected, EngineTimeout, OutputError, XladdinError
from ..tasks.base import Provenance, Task
from .cache import cache_key
from .fitting import ContextFit

# Errors after which a task may still give what code alone can (``Task.without_answer``): the model's
# answer failed, the engine took too long, or it refused this request (too long). An engine that
# cannot be reached or is misconfigured stays an error.
NO_ANSWER_ERRORS = (OutputError, EngineTimeout, EngineRejected)


@dataclass(frozen=True, slots=True, eq=False)
class Prepared:
    key: str  # the cache key it was asked under
    model: str  # the model id in that key
    messages: list[dict[str, str]]
    schema: dict[str, Any]  # the JSON schema sent for this row
    validate: Callable[[str | dict[str, Any]], BaseModel]  # the answer (JSON text or a cached dict); raises ValueError
    finish: Callable[[BaseModel, bool], Any]  # (validated answer, from the cache) → the result
    alone: Callable[[XladdinError], Any | None]  # what code alone gives after that error (None: the error)

    @property
    def length(self) -> int:
        """Characters sent: the queue takes the longest first."""
        return sum(len(m["content"]) for m in self.messages)


class Requests:
    """How a row becomes its prepared request on one engine: the task sized to the engine's context,
    the key (task, version, what changes the prompt, model, sampling, input) and the result makers."""

    def __init__(self, engine: Engine, params: SamplingParams, context: ContextFit):
        self.engine, self.params, self.context = engine, params, context
        self._params = params.model_dump()

    def key(self, task: Task, inp: BaseModel) -> str:
        return self._key(self.context.fit(task), inp)

    def _key(self, fitted: Task, inp: BaseModel) -> str:
        return cache_key(task=fitted.name, task_version=fitted.version, task_config=fitted.key_config(inp),
                         model=self.engine.model_id, params=self._params, inp=inp)

    def prepare(self, task: Task, inp: BaseModel) -> Prepared:
        fitted, model = self.context.fit(task), self.engine.model_id
        provenance = functools.partial(_provenance, model, task.version)

        def alone(error: XladdinError) -> Any | None:
            if not isinstance(error, NO_ANSWER_ERRORS):
                return None
            return fitted.without_answer(inp, error, provenance(False))

        return Prepared(key=self._key(fitted, inp), model=model, messages=fitted.messages(inp),
                        schema=fitted.schema_for(inp), validate=functools.partial(_validate, fitted, inp),
                        finish=lambda out, cached: fitted.finish(inp, out, provenance(cached)),
                        alone=alone)


@functools.lru_cache(maxsize=64)
def _provenance(model: str, task_version: str, cached: bool) -> Provenance:
    return Provenance(model=model, task_version=task_version, cached=cached)


def _validate(task: Task, inp: BaseModel, data: str | dict[str, Any]) -> BaseModel:
    return task.validate_output(data, inp)
