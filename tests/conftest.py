from __future__ import annotations

import json
import signal
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from xladdin.engine.embedded import EmbeddedEngine
from xladdin.engine.gguf_files import ModelFile, resolve_model
from xladdin.settings import Settings
from xladdin.testing import write_tiny_qwen_gguf

# A test run started in the background ignores SIGINT, and an ignored signal survives exec: the CLI
# and server processes the Ctrl-C tests start would never see it. They get it delivered as a terminal would.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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


def run_python(code: str, model_path, timeout: float = 120):
    """``python -c code`` in a fresh process on the tiny model (a plain Python session, as a user's)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, XLADDIN_MODEL=str(model_path), XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


def tiny_settings(tmp_path, **overrides) -> Settings:
    values = {"cache_dir": tmp_path / "cache", "max_tokens": TINY_MAX_TOKENS, "n_ctx": 4096, "timeout": 60}
    values.update(overrides)
    return Settings.load(values)


@pytest.fixture(scope="session")
def tiny_engine(tiny_model, tmp_path_factory):
    """One embedded engine with the tiny model, shared by the session (also serves HTTP on loopback)."""
    settings = tiny_settings(tmp_path_factory.mktemp("engine"), max_parallel=4)
    engine = EmbeddedEngine(settings.embedded, tiny_model)
    engine.load()
    yield engine
    engine.close()


class _Routes:
    """``routes`` maps a path to (status, content type, body), or to a function of the request's JSON
    body returning them; ``hits`` records the paths asked, ``bodies`` what was posted, ``authorizations``
    each request's Authorization header; with ``authorization`` a request without that header is 401."""

    def __init__(self, routes, authorization: str | None = None):
        self.routes = routes
        self.authorization = authorization
        self.hits: list[str] = []
        self.bodies: list[dict] = []
        self.authorizations: list[str | None] = []

    def answer(self, path: str, content: bytes, authorization: str | None = None) -> tuple[int, str, bytes]:
        self.hits.append(path)
        self.authorizations.append(authorization)
        if self.authorization is not None and authorization != self.authorization:
            return 401, "application/json", b'{"error": "unauthorized"}'
        posted = json.loads(content) if content else None
        if posted is not None:
            self.bodies.append(posted)
        route = self.routes.get(path, (404, "text/plain", b"not found"))
        return route(posted) if callable(route) else route


class Server(_Routes):
    """A real HTTP server on 127.0.0.1 answering ``routes`` (on ``port``, default a free one). With
    ``keep_alive`` it speaks HTTP/1.1 and keeps connections open, and ``close`` ends every one it holds, as
    a server process that exits."""

    def __init__(self, routes, *, port: int = 0, keep_alive: bool = False, authorization: str | None = None):
        super().__init__(routes, authorization)
        outer = self
        self.conns: list[socket.socket] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def setup(self):
                super().setup()
                if keep_alive:
                    outer.conns.append(self.connection)

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                status, ctype, body = outer.answer(self.path, self.rfile.read(length) if length else b"",
                                                   self.headers.get("Authorization"))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class MockServer(Server):
    """``Server`` on a socket of its own for answers of any shape; ``engine(settings)`` is an HTTP engine
    that reaches it (``settings`` name its URL)."""

    def engine(self, settings):
        from xladdin.engine.openai_http import OpenAIHTTPEngine

        return OpenAIHTTPEngine(settings.openai_http)


def vllm_models(root: str, served: str = "qwen") -> tuple[int, str, bytes]:
    """/v1/models as vLLM answers it (served name, the real model in ``root``)."""
    data = {"object": "list", "data": [{"id": served, "object": "model", "owned_by": "vllm", "root": root,
                                         "parent": None, "max_model_len": 8192}]}
    return 200, "application/json", json.dumps(data).encode()
