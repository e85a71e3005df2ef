"""One structured call: ask the engine for a task's answer, validate it, and when it does not
match, ask once more *with the validation error* in the messages (the same request at
temperature 0 with the same seed could only get the same answer). What code can mend, the
request's validator mends (the task's ``repair``) before validation; what is still wrong is a typed ``OutputError``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from ..engine import Engine, SamplingParams
from ..errors import Attempt, OutputError, RetryError, first_error
from .prepared import Prepared


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
