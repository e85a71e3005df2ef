"""The embedded engine in a process of its own, for a host that cannot load llama.cpp (Calc: LibreOffice's
C++ runtime clashes with it): ``PrivateServer``, an OpenAI-compatible engine over ``xladdin.server.cpu_server``
on 127.0.0.1, started by the first request the cache cannot answer and ended with its parent process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import queue
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..settings import EmbeddedOptions, HTTPOptions, SamplingParams
from .base import Started
from .gguf_files import resolve_model
from .openai_http import OpenAIHTTPEngine
from .processes import ServerProcess

log = logging.getLogger(__name__)


class PrivateServer(OpenAIHTTPEngine):
    """The embedded engine in a process of its own (``xladdin.server.cpu_server`` on 127.0.0.1, stopped
    with the runtime): llama.cpp cannot be loaded into LibreOffice's process, whose C++ runtime
    clashes with it. The server starts with the first request the cache cannot answer: what it
    serves (its model's identity, name and context) is remembered by the model file's fingerprint
    (``private-servers.json`` in the cache directory), so a sheet reopened from the cache never
    loads the model."""

    def __init__(self, options: EmbeddedOptions, python: str, cache_dir: Path):
        """``options``: the embedded engine's (the model the server loads); ``cache_dir``: where what it
        served is remembered."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        super().__init__(HTTPOptions(url=f"http://127.0.0.1:{self.port}/v1", timeout=options.timeout,
                                     max_parallel=options.max_parallel, structured_output=options.structured_output,
                                     retries=0))
        self._embedded, self._python = options, python
        self._server: Any = None
        self._file = Path(cache_dir) / "private-servers.json"
        self._fingerprint: str | None = None
        self._spawning: asyncio.Lock | None = None

    def _spawn(self) -> None:
        e = self._embedded
        cmd = [self._python, "-m", "xladdin.server.cpu_server", "--host", "127.0.0.1", "--port", str(self.port),
               "--parallel", str(e.max_parallel or 4), "--n-ctx", str(e.n_ctx), "--exit-with", str(os.getpid())]
        cmd += ["--model", e.model] if e.model else []
        env = {**os.environ, "XLADDIN_N_THREADS": str(e.n_threads)}
        server = _from_lasting_thread(lambda: ServerProcess(cmd, f"http://127.0.0.1:{self.port}", env=env))
        server.wait_ready(600)
        self._server = server

    def _known(self) -> dict[str, Any]:
        try:
            data = json.loads(self._file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    async def start(self) -> Started:
        """Who would serve: remembered for this model file, else asked of the server, started now."""
        if self.model_id and self.served:
            return self.started()
        e = self._embedded
        self._fingerprint = (await asyncio.to_thread(resolve_model, e.model, e.models_dir, progress=False)).model_id
        known = self._known().get(self._fingerprint)
        if isinstance(known, dict) and {"model", "served"} <= known.keys():
            self.model_id, self.served = known["model"], known["served"]
            self.max_model_len = self.context_tokens = known.get("context")
            return self.started()
        await self._running()
        return self.started()

    async def _running(self) -> None:
        """The server started and asked what it serves (once), and that remembered."""
        if self._server is not None:
            return
        self._spawning = self._spawning or asyncio.Lock()
        async with self._spawning:
            if self._server is not None:
                return
            await asyncio.to_thread(self._spawn)
            remembered = self.model_id
            self.model_id, self.served = "", self.options.served_model or ""
            await super().start()
            if remembered and remembered != self.model_id:
                log.warning("the private server serves %s, not %s as remembered", self.model_id, remembered)
            known = self._known()
            known[self._fingerprint or self.model_id] = {"model": self.model_id, "served": self.served,
                                                         "context": self.max_model_len}
            try:
                self._file.parent.mkdir(parents=True, exist_ok=True)
                self._file.write_text(json.dumps(known, ensure_ascii=False), encoding="utf-8")
            except OSError:
                pass  # not remembered: the next process starts its server to ask

    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any], params: SamplingParams) -> str:
        await self._running()
        return await super().complete(messages, schema, params)

    async def count_tokens(self, text: str) -> int | None:
        await self._running()
        return await super().count_tokens(text)

    async def server_load(self) -> tuple[int, int] | None:
        return await super().server_load() if self._server is not None else None

    def describe(self) -> str:
        state = "private CPU server" if self._server is not None else "private CPU server, not started"
        return f"{super().describe()} ({state})"

    async def aclose(self) -> None:
        await super().aclose()
        if self._server is not None:
            await asyncio.to_thread(self._server.stop, 10)


_starter: queue.SimpleQueue | None = None
_starter_lock = threading.Lock()


def _from_lasting_thread(start: Callable[[], Any]) -> Any:
    """``start()`` run on a thread that lives as long as this process. The private server asks the
    kernel to end it when its parent dies (``cpu_server --exit-with``), and on Linux the kernel takes the
    end of the thread that started a child for its parent's: a worker thread of the engine's loop
    may end long before LibreOffice does."""
    global _starter
    with _starter_lock:
        if _starter is None:
            _starter = queue.SimpleQueue()
            jobs = _starter

            def serve() -> None:
                while True:
                    job, done = jobs.get()
                    try:
                        done.set_result(job())
                    except BaseException as e:  # noqa: BLE001  (handed to the caller)
                        done.set_exception(e)

            threading.Thread(target=serve, name="xladdin-server-starter", daemon=True).start()
        jobs = _starter
    done: concurrent.futures.Future = concurrent.futures.Future()
    jobs.put((start, done))
    return done.result()
