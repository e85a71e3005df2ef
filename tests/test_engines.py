"""Engines are built through the one registry, each from its own options (a typo is an error)."""

import pytest
from pydantic import ValidationError

from xladdin.engine import ENGINES, build_engine, engine_kind
from xladdin.engine.embedded import EmbeddedEngine, EmbeddedOptions
from xladdin.engine.openai_http import HTTPOptions, OpenAIHTTPEngine
from xladdin.errors import ConfigError
from xladdin.settings import Settings


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
    engine = OpenAIHTTPEngine(s)
    assert engine.options == HTTPOptions(url="http://gpu:8000", timeout=7, retries=1, served_model="qwen")
    assert engine.server_url == "http://gpu:8000/v1" and engine.served == "qwen"
    embedded = EmbeddedEngine(Settings.load({"n_ctx": 2048, "max_parallel": 2, "models_dir": str(tmp_path)}))
    assert (embedded.options.n_ctx, embedded.max_parallel, embedded.options.models_dir) == (2048, 2, tmp_path)
