"""Errors that keep what happened: the answer that stayed invalid and every attempt, the server and
the transport's error behind an engine error, their own types for a bug and a stall."""

from __future__ import annotations

import pytest
from conftest import MockServer, vllm_models
from kit import on_engine

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.errors import (
    EngineError,
    EngineRejected,
    EngineStalled,
    EngineTimeout,
    InternalError,
    OutputError,
    RetryError,
    XladdinError,
    internal_error,
)
from xladdin.settings import Settings
from xladdin.tasks import ClassifyTask
from xladdin.testing import ScriptedEngine


def test_an_answer_still_invalid_after_asking_again_keeps_the_last_answer_and_every_attempt(tmp_path):
    answers = iter(['{"label": 5}', '{"label": "其他"}'])
    task = ClassifyTask()
    with Batcher(ScriptedEngine(lambda m: next(answers)), Cache(tmp_path / "c")) as b:
        with pytest.raises(RetryError) as caught:
            b.run(task, task.parse({"text": "营收下降", "labels": ["利好", "利空"]}))
    error = caught.value
    assert isinstance(error, OutputError) and error.answer == '{"label": "其他"}'
    assert [a.answer for a in error.attempts] == ['{"label": 5}', '{"label": "其他"}']
    assert all("does not match the schema" in a.error for a in error.attempts)
    assert str(error) == error.attempts[-1].error  # what a cell shows: the last fault


def test_an_engine_error_names_its_server_and_keeps_the_transport_s_error(tmp_path):
    server = MockServer({"/v1/models": vllm_models("Qwen/Qwen3-8B"),
                         "/v1/chat/completions": (400, "application/json",
                                                  b'{"error": {"message": "prompt too long"}}')})
    settings = Settings.load({"engine_url": server.url, "cache_dir": tmp_path / "c", "retries": 0}, env={})

    async def ask(engine):
        await engine.start()
        return await engine.complete([{"role": "user", "content": "x"}], {"type": "object"}, settings.sampling)

    try:
        with pytest.raises(EngineRejected) as caught:
            on_engine(server.engine(settings), ask)
    finally:
        server.close()
    error = caught.value
    assert error.url == server.url and server.url in str(error) and "prompt too long" in str(error)
    import aiohttp

    # what the transport says of it, for a traceback
    assert isinstance(error.__cause__, aiohttp.ClientResponseError) and error.__cause__.status == 400


def test_a_bug_and_a_stall_have_types_of_their_own():
    bug = internal_error(KeyError("x"))
    assert isinstance(bug, InternalError) and isinstance(bug.__cause__, KeyError) and "KeyError" in str(bug)
    assert issubclass(EngineStalled, EngineTimeout) and issubclass(EngineTimeout, EngineError)
    assert issubclass(InternalError, XladdinError) and not issubclass(InternalError, EngineError)
