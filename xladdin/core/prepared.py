"""One request, prepared once where it is made (``Batcher.prepare``).

Everything the rest of its way needs travels with it, as data: the messages and the schema sent,
the key and the model it was asked under, and the fitted task with the parsed input, whose
``validate``, ``finish`` and ``alone`` are the request's own methods. The batcher, the structured
call and the cache use these and never hold the task apart from its request; an answer is stored
only under ``key``, and only when the engine still serves ``model``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..engine import SamplingParams, Started
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

