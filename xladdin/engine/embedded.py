"""In-process CPU engine: xllamacpp (llama.cpp server core) with ``n_parallel``
slots and continuous batching. Requests run in a thread pool sized to the slots;
llama.cpp releases the GIL while it decodes.

Answers are streamed inside the process, so the engine sees every token as it is made: ``timeout``
is how long the engine may go without making any (a stall), not how long an answer may take. A
slow CPU computing a long answer never times out its row; an engine that stops making tokens
does."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from ..errors import EngineError, EngineRejected, EngineTimeout, OutputError
from ..settings import EmbeddedOptions
from .base import Engine, SamplingParams, Started
from .gguf_files import ModelFile, resolve_model
from .openai_http import request_fields

DEFAULT_SLOTS = 4
PROMPT_BATCH = 512  # tokens of a prompt read in one step: llama.cpp's physical batch (n_ubatch) is 512 too


class EmbeddedEngine(Engine):
    kind: ClassVar[str] = "embedded"
    options_model = EmbeddedOptions

    def __init__(self, options: EmbeddedOptions, model: ModelFile | None = None):
        self.options = options
        self.structured_output = options.structured_output
        self.max_parallel = self.options.max_parallel or DEFAULT_SLOTS
        self.parallel_limit, self.timeout = self.options.max_parallel, self.options.timeout
        self.context_tokens = self.options.n_ctx
        self._model = model
        self._server: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self.address: str | None = None
        self._loading = threading.Lock()
        self.last_progress = 0.0  # when a request last began, read a step of its prompt or made a token

    async def start(self) -> Started:
        """Identify the model (its id keys the cache); the weights load on the first request,
        so a run or a recalculation answered from the cache never waits for them."""
        if not self.model_id:
            await asyncio.to_thread(self.identify)
        return self.started()

    def identify(self) -> None:
        if self._model is None:
            self._model = resolve_model(self.options.model, self.options.models_dir)
        self.model_id = self._model.model_id
        self.starter = self._model.starter

    def _load_once(self) -> None:
        with self._loading:
            if self._server is None:
                self.load()

    def load(self, host: str = "127.0.0.1", port: int = 0, api_key: str | None = None) -> None:
        """Load the model (blocking). The llama.cpp HTTP front also listens on ``host:port``."""
        import xllamacpp as xlc

        self.identify()
        p = xlc.CommonParams()
        p.model.path = str(self._model.path)
        p.n_parallel = self.max_parallel
        p.n_ctx = self.options.n_ctx * self.max_parallel
        p.cpuparams.n_threads = self.options.n_threads
        p.cpuparams_batch.n_threads = self.options.n_threads
        p.n_batch = PROMPT_BATCH  # the prompt read in steps this size, each reported (``chat``)
        # llama.cpp keeps up to 8 GiB of past prompts' KV state in RAM by default: in a long
        # Excel session of distinct rows that is steady growth (bench/: memory), so it is capped.
        p.cache_ram_mib = self.options.prompt_cache_mib
        p.port = port
        p.hostnames = [host]
        p.model_alias = {self.model_id}
        if api_key:
            p.api_keys = [api_key]
        p.verbosity = 3 if self.options.verbose else -1
        try:
            self._server = xlc.Server(p)
        except Exception as e:
            raise EngineError(f"embedded engine cannot load {self._model.path}: {e}") from None
        self.address = self._server.listening_address
        self._pool = ThreadPoolExecutor(self.max_parallel, thread_name_prefix="xladdin-engine")

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """One blocking chat completion through the in-process server, streamed: its start (the queue of
        requests moved), every step of its prompt read (``return_progress``: a long report's prompt on a
        busy CPU takes minutes before its first token) and every token are signs of progress
        (``last_progress``); the chunks are put together as one completion."""
        self.last_progress = time.monotonic()
        content: list[str] = []
        finish: list[Any] = [None]
        error: list[Any] = []

        def chunk(part: Any) -> None:  # returns nothing: a true value would stop the answer
            self.last_progress = time.monotonic()
            if not isinstance(part, dict) or "error" in part:
                error.append(part.get("error", part) if isinstance(part, dict) else part)
                return
            for choice in part.get("choices") or ():
                content.append((choice.get("delta") or {}).get("content") or "")
                finish[0] = choice.get("finish_reason") or finish[0]

        result = self._server.handle_chat_completions({**body, "stream": True, "return_progress": True}, chunk)
        if isinstance(result, dict) and "error" in result:
            error.append(result["error"])
        if error or finish[0] is None:
            err = error[0] if error else "the answer ended without a finish reason"
            message = err.get("message", err) if isinstance(err, dict) else err
            kind = EngineRejected if "context" in str(message) or "exceed" in str(message) else EngineError
            raise kind(f"embedded engine: {message}")
        message = {"role": "assistant", "content": "".join(content)}
        return {"choices": [{"finish_reason": finish[0], "message": message}]}

    async def count_tokens(self, text: str) -> int | None:
        if self._server is None:
            await asyncio.to_thread(self._load_once)
        result = await asyncio.to_thread(self._server.handle_completions, {"prompt": text, "max_tokens": 0})
        usage = result.get("usage") if isinstance(result, dict) else None
        return usage.get("prompt_tokens") if isinstance(usage, dict) else None

    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any], params: SamplingParams) -> str:
        if self._server is None:
            await asyncio.to_thread(self._load_once)
        body = {
            **request_fields(messages, schema, self.structured_output),
            "temperature": params.temperature,
            "seed": params.seed,
            "max_tokens": params.max_tokens,
            "chat_template_kwargs": {"enable_thinking": False},
        }
        loop = asyncio.get_running_loop()
        asked = time.monotonic()
        answer = loop.run_in_executor(self._pool, self.chat, body)
        while True:
            # a stall: no token made by the engine, for any request, since this one was asked
            quiet = time.monotonic() - max(asked, self.last_progress)
            if quiet >= self.options.timeout:
                answer.cancel()
                raise EngineTimeout(f"embedded engine: no progress for {self.options.timeout:g}s (a stalled "
                                    "engine, or a CPU too busy to compute: raise XLADDIN_TIMEOUT / --timeout)")
            done, _ = await asyncio.wait({answer}, timeout=self.options.timeout - quiet)
            if done:
                result = answer.result()
                break
        choice = result["choices"][0]
        if choice.get("finish_reason") == "length":
            raise OutputError(f"answer cut at max_tokens={params.max_tokens}")
        return choice["message"]["content"]

    async def aclose(self) -> None:
        self.close()

    def abort(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        """Release the engine. Requests still computing (abandoned after a timeout) are not waited
        for here: each holds the server until its answer is done, then it is freed."""
        self.abort()
        self._server = None  # the server stops when the last reference goes

    def describe(self) -> str:
        where = f" at {self._model.path}" if self._model else ""
        return f"embedded {self.model_id}{where}"
