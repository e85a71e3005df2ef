from __future__ import annotations

import pytest

from xladdin.engine.embedded import EmbeddedEngine
from xladdin.models import ModelFile, resolve_model
from xladdin.settings import Settings
from xladdin.testing import write_tiny_qwen_gguf

# The tiny model writes byte-level noise: give it room to finish its JSON.
TINY_MAX_TOKENS = 1500


@pytest.fixture(autouse=True)
def isolated_state(tmp_path, monkeypatch):
    """Every test gets its own cache and config dirs and no XLADDIN_* from the caller."""
    import os

    for name in list(os.environ):
        if name.startswith("XLADDIN_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XLADDIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XLADDIN_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XLADDIN_HUB_URL", "http://127.0.0.1:9")  # never the network
    yield


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory):
    return write_tiny_qwen_gguf(tmp_path_factory.mktemp("model") / "tiny-qwen3.gguf")


@pytest.fixture(scope="session")
def tiny_model(tiny_model_path) -> ModelFile:
    return resolve_model(str(tiny_model_path), tiny_model_path.parent)


def tiny_settings(tmp_path, **overrides) -> Settings:
    values = {"cache_dir": tmp_path / "cache", "max_tokens": TINY_MAX_TOKENS, "n_ctx": 4096, "timeout": 60}
    values.update(overrides)
    return Settings.load(values)


@pytest.fixture(scope="session")
def tiny_engine(tiny_model, tmp_path_factory):
    """One embedded engine with the tiny model, shared by the session (also serves HTTP on loopback)."""
    settings = tiny_settings(tmp_path_factory.mktemp("engine"), max_parallel=4)
    engine = EmbeddedEngine(settings, tiny_model)
    engine.load()
    yield engine
    engine.close()
