"""The one protocol every engine implements: ``async complete(messages, schema, params) -> text``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from ..settings import EngineOptions, SamplingParams
from .gguf_files import names_starter

STALL_MARGIN_S = 5.0  # beyond an engine's own timeout before the batcher calls it stalled

__all__ = ["Engine", "EngineOptions", "SamplingParams", "Started"]


@dataclass(frozen=True, slots=True)
class Started:
    """What an engine learned when it started (``Engine.start``'s value): the model that keys the cache, how
    many requests it may hold at once, whether it reports its load (the batcher's window then adapts), the
    tokens one request may hold, and whether it serves the offline starter model."""

    model_id: str
    max_parallel: int
    reports_load: bool = False
    context_tokens: int | None = None
    starter: bool = False  # also when a server names its model by the starter's file (a CPU server's default)

    def __post_init__(self) -> None:
        if not self.starter and names_starter(self.model_id):
            object.__setattr__(self, "starter", True)


class Engine(ABC):
    """A way to reach a model. Capabilities are class flags; ``options_model`` is its configuration
    (for a built-in engine, the settings' section of its name: ``Settings.options_for(kind)``)."""

    kind: ClassVar[str]
    options_model: ClassVar[type[EngineOptions]] = EngineOptions
    reports_load: bool = False  # server_load() may answer: the batcher adapts its window to it
    server_url: str | None = None  # a server reached over the network: when it is offline, the model it
    # served last (remembered under this URL) still keys the answers cached for it

    model_id: str = ""
    max_parallel: int = 1  # requests it may hold at once (an embedded engine's slots, a server's default)
    parallel_limit: int | None = None  # a limit the user set in its options: kept as given, never adapted
    timeout: float | None = None  # seconds one request may go without an answer or a sign of progress,
    # its retries included (its options' ``timeout``); None: no bound
    context_tokens: int | None = None  # tokens one request may hold (prompt and answer), when known
    starter: bool = False  # True when serving the offline starter model, not a configured Qwen
    structured_output: bool = True  # the schema goes as response_format (constrained decoding); False: into
    # the prompt, where it takes room from the report's text (``request.ContextFit``)
    last_progress: float = 0.0  # when the engine last showed it is working (monotonic): a token made, a
    # server's slots moving; 0 when it does not say (then only answers count)

    @property
    def stall_s(self) -> float | None:
        """How long a request may go without an answer or a sign of life before the engine is taken to
        have stalled: its own ``timeout`` and a margin, so that the engine's own timeout error (which
        names what it waited for) comes first. ``None``: never."""
        return None if self.timeout is None else self.timeout + STALL_MARGIN_S

    async def start(self) -> Started:
        """Load or connect, and say what was learned (``started()``: the engine's attributes say the same
        after it)."""
        return self.started()

    def started(self) -> Started:
        """What the engine knows of itself now, as a value."""
        return Started(model_id=self.model_id, max_parallel=self.max_parallel, reports_load=self.reports_load,
                       context_tokens=self.context_tokens, starter=self.starter)

    @abstractmethod
    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any], params: SamplingParams) -> str:
        """Return the assistant text for ``messages``, constrained to the JSON ``schema``."""

    async def count_tokens(self, text: str) -> int | None:
        """``text``'s length in the model's own tokens, or ``None`` when the engine cannot say."""
        return None

    async def server_load(self) -> tuple[int, int] | None:
        """Requests (running, waiting) in the engine now, or ``None`` when it does not say."""
        return None

    async def aclose(self) -> None:
        """Release the engine."""

    def abort(self) -> None:
        """Give up on requests still being computed (Ctrl-C): the next ``aclose`` must not wait for them."""

    def describe(self) -> str:
        return self.model_id
