"""Engines are built through the one registry, each from its own options (a typo is an error)."""

import json

import pytest
from pydantic import ValidationError

from xladdin.engine import ENGINES, build_engine, engine_kind
from xladdin.engine.embedded import EmbeddedEngine
from xladdin.engine.openai_http import OpenAIHTTPEngine
from xladdin.errors import ConfigError, EngineError
from xladdin.settings import EmbeddedOptions, HTTPOptions, Settings


def test_the_registry_builds_every_engine(tmp_path):
    assert set(ENGINES) == {"openai_http", "embedded"}
    assert isinstance(build_engine(Settings.load({"engine_url": "http://127.0.0.1:9"})), OpenAIHTTPEngine)
    assert isinstance(build_engine(Settings.load({})), EmbeddedEngine)
    both = Settings.load({"engine": "embedded", "engine_url": "http://127.0.0.1:9"})
    assert engine_kind(both) == "embedded" and isinstance(build_engine(both), EmbeddedEngine)
    with pytest.raises(ConfigError, match="unknown engine 'vllm' .*known: auto, openai_http, embedded"):
        build_engine(Settings.load({"engine": "vllm"}))
    with pytest.raises(ConfigError, match="needs a URL"):
        build_engine(Settings.load({"engine": "openai_http"}))


def test_engine_options_reject_typos_and_come_from_settings(tmp_path):
    with pytest.raises(ValidationError, match="n_ctxx"):
        EmbeddedOptions(models_dir=tmp_path, n_ctxx=8192)
    with pytest.raises(ValidationError, match="retires"):
        HTTPOptions(url="http://x", retires=3)
    s = Settings.load({"engine_url": "http://gpu:8000", "timeout": 7, "retries": 1, "served_model": "qwen"})
    engine = OpenAIHTTPEngine(s.openai_http)
    assert engine.options == HTTPOptions(url="http://gpu:8000", timeout=7, retries=1, served_model="qwen")
    assert engine.server_url == "http://gpu:8000/v1" and engine.served == "qwen"
    embedded = EmbeddedEngine(Settings.load({"n_ctx": 2048, "max_parallel": 2, "models_dir": str(tmp_path)}).embedded)
    assert (embedded.options.n_ctx, embedded.max_parallel, embedded.options.models_dir) == (2048, 2, tmp_path)
    # each built-in engine's options model is the settings' section of its name
    for kind in ENGINES:
        cls = __import__("xladdin.engine", fromlist=["engine_class"]).engine_class(kind)
        assert Settings.model_fields[kind].annotation is cls.options_model
        assert type(Settings.load({}).options_for(kind)) is cls.options_model


@pytest.mark.parametrize("body", [b"<html>proxy login</html>", b'{"object": "error"}', b"[1, 2]"])
def test_a_200_that_is_not_a_chat_completion_is_an_error_naming_the_server(tmp_path, body):
    """A proxy page or a stray JSON with status 200: an EngineError naming the server, never cached."""
    from conftest import MockServer, vllm_models

    from xladdin.core.batcher import Batcher
    from xladdin.core.cache import Cache
    from xladdin.core.resolver import Resolver
    from xladdin.tasks import ScreenTask

    server = MockServer({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": (
        200, "text/html" if body.startswith(b"<") else "application/json", body)})
    try:
        settings = Settings.load({"engine_url": server.url, "cache_dir": tmp_path / "cache", "retries": 0})
        with Batcher.from_settings(settings, server.engine(settings), own_engine=True) as b:
            [result] = Resolver(b).map(ScreenTask(), [{"code": 600519, "name": "贵州茅台", "roe": 30, "pe_ttm": 25,
                                                        "report_text": "营收100亿元"}])
    finally:
        server.close()
    assert isinstance(result, EngineError), result
    assert str(result).startswith(f"{server.url} answered without a chat completion: ")
    assert Cache(tmp_path / "cache").stats()["entries"] == 0


def test_the_test_engine_is_an_engine_with_the_protocol_s_signatures():
    """``ScriptedEngine`` (the unit tests' engine) is an ``Engine``: whatever it overrides keeps the
    protocol's signature, so a change of the protocol reaches the tests."""
    import inspect

    from xladdin.engine.base import Engine
    from xladdin.testing import ScriptedEngine

    assert issubclass(ScriptedEngine, Engine) and not inspect.isabstract(ScriptedEngine)
    overridden = [n for n, f in vars(ScriptedEngine).items() if callable(f) and hasattr(Engine, n) and n != "__init__"]
    assert "complete" in overridden
    for name in overridden:
        ours, protocol = inspect.signature(getattr(ScriptedEngine, name)), inspect.signature(getattr(Engine, name))
        assert list(ours.parameters) == list(protocol.parameters), name
        assert inspect.iscoroutinefunction(getattr(ScriptedEngine, name)) == inspect.iscoroutinefunction(
            getattr(Engine, name)), name


def test_an_answer_naming_another_model_is_not_used(tmp_path):
    """A response whose ``model`` is not the one asked for (a proxy that routed it elsewhere) is that
    row's error, never cached."""
    from conftest import Server, vllm_models

    from xladdin.core.batcher import Batcher
    from xladdin.core.cache import Cache
    from xladdin.core.resolver import Resolver
    from xladdin.tasks import ScreenTask
    from xladdin.testing import screen_answer

    def chat(model):
        data = {"id": "c", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": screen_answer()}}]}
        return 200, "application/json", json.dumps(data, ensure_ascii=False).encode()

    rows = [{"code": 600519, "name": "贵州茅台", "roe": 30, "pe_ttm": 25, "report_text": "营收100亿元"}]
    for model, cached in (("qwen-7b-other", 0), ("qwen", 1)):
        server = Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": chat(model)})
        try:
            settings = Settings.load({"engine_url": server.url, "cache_dir": tmp_path / model, "retries": 0})
            with Batcher.from_settings(settings) as b:
                [result] = Resolver(b).map(ScreenTask(), rows)
        finally:
            server.close()
        if cached:
            assert result.reason and result.provenance.model == "Qwen/Qwen3-8B"
        else:
            assert isinstance(result, EngineError) and "answered as 'qwen-7b-other', not 'qwen'" in str(result)
        assert Cache(tmp_path / model).stats()["entries"] == cached


def test_an_engine_from_another_package_is_found_through_its_entry_point_and_used_by_the_cli(tmp_path):
    """A package that registers an engine under ``xladdin.engines`` (as the built-ins are) is built by name:
    ``XLADDIN_ENGINE=echo`` screens a pool through it; a broken registration is a clear error."""
    import os

    from kit import run_cli

    site = tmp_path / "site"
    (site / "echo_engine-1.0.dist-info").mkdir(parents=True)
    (site / "echo_engine-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-engine\n"
                                                                 "Version: 1.0\n", encoding="utf-8")
    (site / "echo_engine-1.0.dist-info" / "entry_points.txt").write_text(
        "[xladdin.engines]\necho = echo_engine:EchoEngine\nbroken = echo_engine:Missing\n", encoding="utf-8")
    (site / "echo_engine.py").write_text(
        "from xladdin.engine import Engine, EngineOptions\n"
        "from xladdin.testing import screen_answer\n\n\n"
        "class EchoOptions(EngineOptions):\n"
        "    voice: str = '回声引擎'\n\n\n"
        "class EchoEngine(Engine):\n"
        "    kind = 'echo'\n"
        "    options_model = EchoOptions\n\n"
        "    def __init__(self, options):  # built from its options model alone\n"
        "        self.options = options\n"
        "        self.model_id = f'echo-{options.timeout:g}'\n"
        "        self.max_parallel = 2\n\n"
        "    async def complete(self, messages, schema, params):\n"
        "        return screen_answer(self.options.voice)\n", encoding="utf-8")
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,ROE,市盈率TTM\n600519,贵州茅台,30,25\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(site), XLADDIN_ENGINE="echo", XLADDIN_CACHE_DIR=str(tmp_path / "cache"),
               XLADDIN_TIMEOUT="9")
    r = run_cli("screen", pool, "-o", tmp_path / "o.json", "--no-progress", env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["rows"][0]
    assert row["理由 reason"] == "回声引擎" and row["模型 model"] == "echo-9"  # its options, from the settings
    broken = run_cli("screen", pool, "-o", tmp_path / "b.json", "--no-progress",
                     env={**env, "XLADDIN_ENGINE": "broken"}, timeout=120)
    assert broken.returncode == 2 and "engine 'broken' (echo_engine:Missing) cannot be loaded" in broken.stderr


def test_an_engine_alone_says_its_limits_and_the_batcher_takes_them_as_they_are(tmp_path):
    """One meaning of ``timeout`` (it bounds one request, the engine's retries included: the batcher does
    not multiply it by the retries) and one road for the in-flight limit (the engine's options)."""
    from xladdin.core.batcher import Batcher
    from xladdin.engine.base import STALL_MARGIN_S

    s = Settings.load({"engine_url": "http://127.0.0.1:9", "timeout": 7, "retries": 3, "max_parallel": 12,
                       "cache_dir": str(tmp_path)}, env={})
    with Batcher.from_settings(s) as b:
        assert b.engine.timeout == 7 and b.request_timeout == b.engine.stall_s == 7 + STALL_MARGIN_S
        assert b.engine.parallel_limit == 12 and not b.window.adaptive and b.window.limit == 12
    default = Settings.load({"engine_url": "http://127.0.0.1:9", "cache_dir": str(tmp_path)}, env={})
    with Batcher.from_settings(default) as b:
        assert b.engine.parallel_limit is None  # the server's own default, adapted to its load once known
    options = Settings.load({"timeout": 30, "max_parallel": 2, "models_dir": str(tmp_path)}, env={}).embedded
    embedded = EmbeddedEngine(options)
    assert (embedded.stall_s, embedded.parallel_limit, embedded.max_parallel) == (30 + STALL_MARGIN_S, 2, 2)


def test_start_returns_what_the_engine_learned_and_the_batcher_builds_on_that_value(tmp_path):
    """``start()`` says what it learned as a value: a vLLM server's model (its root), context and load
    reporting; the batcher's window is made from the value start returned, not read back from the engine."""
    from conftest import MockServer, vllm_models
    from kit import on_engine

    from xladdin.core.batcher import Batcher
    from xladdin.core.cache import Cache
    from xladdin.engine import Started
    from xladdin.testing import ScriptedEngine

    gauges = (200, "text/plain",
              b'vllm:num_requests_running{engine="0"} 3.0\nvllm:num_requests_waiting{engine="0"} 0.0\n')
    server = MockServer({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/metrics": gauges})
    try:
        settings = Settings.load({"engine_url": server.url, "cache_dir": tmp_path / "c"}, env={})
        learned = on_engine(OpenAIHTTPEngine(settings.openai_http), lambda engine: engine.start())
    finally:
        server.close()
    assert learned == Started(model_id="Qwen/Qwen3-8B", max_parallel=1024, reports_load=True, context_tokens=8192)

    class Says(ScriptedEngine):
        async def start(self):
            self.model_id = "said-model"
            return Started(model_id="said-model", max_parallel=7)  # its max_parallel attribute stays 2

    with Batcher(Says(lambda _: "{}", max_parallel=2), Cache(tmp_path / "c2")) as b:
        b.start()
        assert b.learned.model_id == "said-model" and b.window.limit == 7 and not b.window.adaptive
