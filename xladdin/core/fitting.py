"""How much report text one request may carry: the engine's context, counted in its own tokens.

The budget is the context (vLLM's ``max_model_len``, the embedded ``n_ctx``) less the answer
budget, the system prompt (and the schema when it goes into the prompt) and the row's other
fields; at most the ``text_tokens`` setting. Characters per token are counted by the engine once
per model and remembered in the cache's side store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..engine import Engine, Started
from ..errors import XladdinError
from ..tasks.base import Task
from .cache import Cache, SerialThread

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
