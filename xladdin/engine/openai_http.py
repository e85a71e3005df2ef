"""Any OpenAI-compatible server: vLLM in production, llama.cpp or SGLang too.

Structured output goes as ``response_format`` json_schema (vLLM ≥ 0.12 ignores
the old ``guided_json`` keys). Thinking is switched off through
``chat_template_kwargs``. The openai client retries connection errors, 429 and
5xx with exponential backoff up to ``retries`` times; ``timeout`` bounds the
whole request, retries included, and a timeout reports the time really waited.

The model is identified by what it is, not by the name it is served under
(every profile serves as ``qwen``): vLLM's ``/v1/models`` gives ``root``, the
model path or repo; llama.cpp gives ``meta`` (parameters, size, vocabulary).
That identity keys the cache and is each result's provenance.

Several servers of one model (``URL1,URL2``: independent vLLM replicas, on one GPU or many) are
one engine: each request goes to the server with the fewest requests in flight from here, their
load readings add up, and they must all serve the same model. A server that goes away is left
out (its requests go to the others) and asked again after ``DOWN_RETRY_S``; before a server that
was down, or was last identified more than ``IDENTIFY_S`` ago, gets a request, its model is
identified again: a server that now serves another model gets none (its answers would be stored
under this model's key). A run starts when at least one server is up, naming those that are not.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any, ClassVar

from ..errors import ConfigError, EngineError, EngineOffline, EngineRejected, EngineTimeout, OutputError
from ..settings import HTTPOptions, Settings
from .base import Engine, SamplingParams, request_fields

DEFAULT_PARALLEL = 32  # in flight when the server does not report its load
ADAPTIVE_CAP = 1024  # the most in flight an adapting window may reach (see xladdin.inflight)
POOL_CONNECTIONS = 32  # connections per HTTP pool (a server gets as many pools as its requests in flight need)
_LOAD_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting")
DOWN_RETRY_S = 5.0  # a server found offline gets no request for this long
IDENTIFY_S = 10.0  # a server's model is identified again when its last identification is older
log = logging.getLogger(__name__)


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def split_urls(urls: str) -> list[str]:
    """``URL`` or ``URL1,URL2,…`` (replicas of one model) as normalised base URLs."""
    return [normalize_base_url(u.strip()) for u in urls.split(",") if u.strip()]


class _Pools:
    """Each server's HTTP connection pools and a small one for what is not a chat (load, token counts).

    Connections are split into small pools: the HTTP library's pool walks every connection it holds
    (and probes each idle one's socket) whenever a request starts or ends, so one pool of ~1,000
    costs the client several times the CPU per row of pools of 32 (``python -m bench client``,
    ``bench/results/client.json``)."""

    def __init__(self, openai: Any, urls: list[str], options: HTTPOptions, transport: Any = None):
        self._openai, self.urls, self.options = openai, urls, options
        self._limits = type(openai.DEFAULT_CONNECTION_LIMITS)  # the HTTP library's own, whichever the SDK uses
        self.http = sys.modules[self._limits.__module__.partition(".")[0]]  # the HTTP library the SDK uses
        # one TLS context for every pool (building one takes milliseconds, and a window of 1,024 makes 32 pools)
        tls = getattr(self.http, "create_ssl_context", None)
        self._client_args = {"verify": tls()} if tls else {}
        if transport is not None:  # the HTTP library's own transport in place of sockets (tests: MockTransport)
            self._client_args = {"transport": transport}
        self.shards: list[list[_Shard]] = [[self._shard(url)] for url in urls]  # more made as needed
        self.meta = openai.DefaultAsyncHttpxClient(limits=self._limits(max_connections=8), **self._client_args)
        self._headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}

    def _shard(self, url: str) -> _Shard:
        http = self._openai.DefaultAsyncHttpxClient(
            limits=self._limits(max_connections=POOL_CONNECTIONS, max_keepalive_connections=POOL_CONNECTIONS,
                                keepalive_expiry=30), **self._client_args)
        return _Shard(self._openai.AsyncOpenAI(base_url=url, api_key=self.options.api_key or "EMPTY",
                                               timeout=self.options.timeout, max_retries=self.options.retries,
                                               http_client=http))

    def pick(self, i: int) -> _Shard:
        """The least busy pool of server ``i``; a new one when every pool has all its connections in use."""
        shards = self.shards[i]
        shard = min(shards, key=lambda s: s.busy)
        if shard.busy >= POOL_CONNECTIONS:
            shard = self._shard(self.urls[i])
            shards.append(shard)
        return shard

    async def count_tokens(self, served: str, text: str) -> int | None:
        """The first server's own count (vLLM's and llama.cpp's ``/tokenize``), else ``None``."""
        url = self.urls[0].removesuffix("/").removesuffix("/v1") + "/tokenize"
        try:
            resp = await self.meta.post(url, json={"model": served, "prompt": text, "content": text},
                                        headers=self._headers, timeout=10.0)
            data = resp.json() if resp.status_code == 200 else {}
        except Exception:  # the transport's own errors, or not JSON: no count
            return None
        if isinstance(data.get("count"), int):
            return data["count"]
        return len(data["tokens"]) if isinstance(data.get("tokens"), list) else None

    async def load(self, base_url: str) -> tuple[int, int] | None:
        """vLLM's requests (running, waiting) on one server (``/metrics``), else ``None``."""
        try:
            resp = await self.meta.get(base_url.removesuffix("/v1") + "/metrics", headers=self._headers, timeout=2.0)
        except Exception:  # the transport's own errors (httpx): no reading
            return None
        if resp.status_code != 200:
            return None
        found = metric_sums(resp.text, _LOAD_METRICS)
        return (int(found.get(_LOAD_METRICS[0], 0)), int(found.get(_LOAD_METRICS[1], 0))) if found else None

    async def aclose(self) -> None:
        for shards in self.shards:
            for shard in shards:
                await shard.client.close()
        await self.meta.aclose()


class _Replicas:
    """Which servers may get a request: up (or down for longer than ``DOWN_RETRY_S``) and serving the
    engine's model, as last identified."""

    def __init__(self, urls: list[str]):
        self.urls = urls
        self.busy = [0] * len(urls)  # requests in flight per server
        self.answered = [0] * len(urls)  # answers per server
        self.down: dict[int, float] = {}  # server → when it was found offline
        self.wrong: dict[int, str] = {}  # server → the other model it serves now
        self.identified = [0.0] * len(urls)  # when each server's model was last identified
        self.identifying: dict[int, tuple[float, asyncio.Future]] = {}  # server → (started, check)
        # the connections each server has answered on: an answer on a new one counts only once the server
        # has been identified after the request was sent (a server replaced at its URL answers on new ones)
        self.streams: list[dict[int, Any]] = [{} for _ in urls]

    def down_urls(self) -> str:
        return ", ".join(self.urls[i] for i in sorted(self.down))

    def usable(self, tried: set[int]) -> list[int]:
        now = time.monotonic()
        return [i for i in range(len(self.urls))
                if i not in tried and i not in self.wrong and now - self.down.get(i, -DOWN_RETRY_S) >= DOWN_RETRY_S]

    def due(self, i: int) -> bool:
        """Server ``i`` is to be identified before its next request: it was down, or its check is old."""
        return i in self.down or time.monotonic() - self.identified[i] > IDENTIFY_S

    async def identify(self, i: int, check: Callable[[], Awaitable[str]], model_id: str,
                       after: float | None = None) -> None:
        """Identify server ``i``'s model (``check``) by a check that starts no sooner than ``after``
        (default: now); requests waiting at once share one check. Marks the server ``wrong`` if its model
        is not ``model_id``."""
        after = time.monotonic() if after is None else after
        if self.identified[i] >= after:
            return
        running = self.identifying.get(i)
        if running is None or running[0] < after:
            running = self.identifying[i] = (time.monotonic(), asyncio.ensure_future(check()))
        started, future = running
        try:
            model = await asyncio.shield(future)
        finally:
            if self.identifying.get(i) is running:
                del self.identifying[i]
        self.identified[i] = max(self.identified[i], started)
        self.down.pop(i, None)
        if model != model_id:
            self.wrong[i] = model
            log.warning("%s now serves %s, not %s: it gets no more requests", self.urls[i], model, model_id)

    def new_connection(self, i: int, stream: Any) -> bool:
        """Whether ``stream`` is a connection server ``i`` has not answered on before (then remembered)."""
        known = self.streams[i]
        if stream is None or id(stream) in known:
            return False
        if len(known) >= 4 * ADAPTIVE_CAP:
            known.clear()
        known[id(stream)] = stream
        return True


class OpenAIHTTPEngine(Engine):
    kind: ClassVar[str] = "openai_http"
    options_model = HTTPOptions

    def __init__(self, settings: Settings | HTTPOptions, *, transport: Any = None):
        """``transport``: an HTTP transport of the SDK's HTTP library to send every request through
        instead of sockets (its ``MockTransport`` answers canned responses in-process)."""
        import openai

        self.options = settings if isinstance(settings, HTTPOptions) else settings.openai_http
        if not self.options.url:
            raise ConfigError("the openai_http engine needs a URL: set XLADDIN_ENGINE_URL or --engine-url")
        self.urls = split_urls(self.options.url)
        self.server_url: str = ",".join(self.urls)  # what the server (or replicas) is known by
        self.max_parallel = self.options.max_parallel or DEFAULT_PARALLEL
        self._openai = openai
        self._pools = _Pools(openai, self.urls, self.options, transport)
        self.replicas = _Replicas(self.urls)
        self.down, self.wrong, self.answered = self.replicas.down, self.replicas.wrong, self.replicas.answered
        self.completion_tokens = 0  # generated, as the server counts them (benchmarks report it per row)
        self.served = self.options.served_model or ""  # the name requests use
        self.max_model_len: int | None = None

    @property
    def pools(self) -> list[int]:
        """HTTP connection pools per server (one per ``POOL_CONNECTIONS`` requests in flight at the peak)."""
        return [len(shards) for shards in self._pools.shards]

    async def _bounded(self, call: Any) -> Any:
        """Await ``call`` (retries included) within ``timeout``; errors become ``EngineError``."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.options.timeout):
                return await call
        except (self._openai.OpenAIError, TimeoutError) as e:
            raise translate(self._openai, e, self.server_url, started) from None

    async def start(self) -> None:
        if self.model_id and self.served:
            return  # (a model id remembered for an offline server has no served name yet)
        listed: dict[int, tuple[str, str, int | None]] = {}
        for i, shards in enumerate(self._pools.shards):
            try:
                listed[i] = await self._listed(shards[0].client)
            except EngineOffline:
                if len(self.urls) == 1:
                    raise
                self.down[i] = time.monotonic()
        if not listed:
            raise EngineOffline(f"engine offline ({self.server_url}): none of the servers answers")
        if self.down:
            log.warning("servers down, their share goes to the others: %s", self.replicas.down_urls())
        found = set(listed.values())
        if len(found) > 1:
            raise EngineError(f"the servers {self.server_url} serve different models: "
                              + "; ".join(f"{name} = {model}" for name, model, _ in sorted(found)))
        self.served, self.model_id, self.max_model_len = found.pop()
        now = time.monotonic()
        for i in listed:
            self.replicas.identified[i] = now
        self.context_tokens = self.max_model_len
        if self.options.max_parallel is None and await self.server_load() is not None:
            # the batcher adapts within this
            self.reports_load, self.max_parallel = True, ADAPTIVE_CAP * len(self.urls)

    async def _listed(self, client: Any) -> tuple[str, str, int | None]:
        """(served name, model identity, context length) of the model one server serves."""
        raw = await self._bounded(client.models.with_raw_response.list())
        return listed_model(raw.http_response.text, str(client.base_url).rstrip("/"), self.served)

    async def _identify(self, i: int, after: float | None = None) -> None:
        async def check() -> str:
            return (await self._listed(self._pools.shards[i][0].client))[1]

        await self.replicas.identify(i, check, self.model_id, after)

    async def count_tokens(self, text: str) -> int | None:
        """The server's own count (vLLM's and llama.cpp's ``/tokenize``), else ``None``."""
        return await self._pools.count_tokens(self.served, text)

    async def server_load(self) -> tuple[int, int] | None:
        """vLLM's requests running and waiting (``/metrics``, summed over engines and servers),
        else ``None``."""
        readings = [await self._pools.load(url) for url in self.urls]
        if any(r is None for r in readings):
            return None
        return sum(r[0] for r in readings), sum(r[1] for r in readings)  # type: ignore[index]

    def _not_used(self, i: int) -> EngineError:
        return EngineError(f"{self.urls[i]} now serves {self.wrong[i]}, not {self.model_id}: its answers are "
                           "not used (restart xladdin to use the new model)")

    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any], params: SamplingParams) -> str:
        if not self.served:
            await self.start()
        body = chat_body(self.served, messages, schema, params, self.options.structured_output)
        tried: set[int] = set()
        while True:
            usable = self.replicas.usable(tried)
            if not usable:
                if self.wrong and not self.down:
                    raise self._not_used(next(iter(self.wrong)))
                raise EngineOffline(f"engine offline ({self.replicas.down_urls() or self.server_url})")
            i = min(usable, key=self.replicas.busy.__getitem__)  # the least busy server
            tried.add(i)
            try:
                if self.replicas.due(i):
                    await self._identify(i)
                    if i in self.wrong:
                        continue
                resp = await self._send(i, body)
            except EngineOffline:
                self.down[i] = time.monotonic()
                if len(self.urls) > 1:
                    log.warning("%s is offline: its requests go to the other servers", self.urls[i])
                continue
            break
        content, finish, tokens, answered_by = chat_answer(resp, self.server_url)
        if answered_by not in (None, self.served):  # e.g. a proxy that sent the request to another model
            raise EngineError(f"{self.urls[i]} answered as {answered_by!r}, not {self.served!r}: the answer is "
                              "not used")
        self.completion_tokens += tokens
        if finish == "length":
            raise OutputError(f"answer cut at max_tokens={params.max_tokens}")
        return content

    async def _send(self, i: int, body: dict[str, Any]) -> Any:
        """The chat completion as the server's response, posted through the SDK's client (its retries,
        errors, timeout and key) as a plain body: the SDK's typed request transform and response models
        add to the client's CPU per row at 1,024 in flight (``python -m bench client``,
        ``bench/results/client.json``)."""
        shard = self._pools.pick(i)
        self.replicas.busy[i] += 1
        shard.busy += 1
        sent = time.monotonic()
        try:
            resp = await self._bounded(shard.client.post("/chat/completions", body=body,
                                                         cast_to=self._pools.http.Response))
        finally:
            self.replicas.busy[i] -= 1
            shard.busy -= 1
        if self.replicas.new_connection(i, resp.extensions.get("network_stream")):  # who answers on it?
            await self._identify(i, after=sent)
            if i in self.wrong:
                raise self._not_used(i)
        self.answered[i] += 1
        return resp

    async def aclose(self) -> None:
        await self._pools.aclose()

    def describe(self) -> str:
        shown = self.served if self.served == self.model_id or not self.served else f"{self.served} = {self.model_id}"
        down = f" (down: {self.replicas.down_urls()})" if self.down else ""
        wrong = "".join(f" ({self.urls[i]} serves {m})" for i, m in self.wrong.items())
        return f"{shown or '(model not yet known)'} at {self.server_url}{down}{wrong}"


def translate(openai: Any, e: Exception, server_url: str, started: float) -> EngineError:
    """The SDK's error (or a timeout) as the engine error a row shows."""
    if isinstance(e, openai.APITimeoutError | TimeoutError):
        return EngineTimeout(f"engine timeout after {time.monotonic() - started:.0f}s ({server_url})")
    if isinstance(e, openai.APIConnectionError):
        return EngineOffline(f"engine offline ({server_url})")
    if isinstance(e, openai.AuthenticationError):
        return EngineError(f"API key rejected by {server_url} — set XLADDIN_API_KEY")
    if isinstance(e, openai.APIStatusError):
        detail = str(e.message).removeprefix(f"Error code: {e.status_code} - ")
        # a request the server refused (too long for its context, malformed): that row's, not the engine's
        kind = EngineRejected if e.status_code in (400, 413, 422) else EngineError
        return kind(f"engine error {e.status_code} ({server_url}): {detail[:200]}")
    return EngineError(f"engine error ({server_url}): {e}")


def listed_model(text: str, url: str, served: str) -> tuple[str, str, int | None]:
    """(served name, model identity, context length) from a server's ``/models`` listing: the model
    ``served``, or its first."""
    try:
        models = {m["id"]: m for m in json.loads(text)["data"]}
    except (ValueError, KeyError, TypeError):
        snippet = " ".join(text.split())[:80]
        raise EngineError(f"{url}/models did not list models as JSON: {snippet!r} — is "
                          "this an OpenAI-compatible server?") from None
    if not models:
        raise EngineError(f"{url} serves no model")
    name = served or next(iter(models))
    if name not in models:
        raise EngineError(f"{url} does not serve {name!r}; it serves {', '.join(models)}")
    return name, model_identity(models[name]), models[name].get("max_model_len")


def chat_body(served: str, messages: list[dict[str, str]], schema: dict[str, Any], params: SamplingParams,
              structured: bool) -> dict[str, Any]:
    return {"model": served, "temperature": params.temperature, "seed": params.seed,
            "max_tokens": params.max_tokens, "chat_template_kwargs": {"enable_thinking": False},
            **request_fields(messages, schema, structured)}


def chat_answer(resp: Any, server_url: str) -> tuple[str, str | None, int, str | None]:
    """(content, finish reason, completion tokens, the model named in it) of a chat completion response."""
    data: Any = None
    try:
        data = resp.json()
        choice = data["choices"][0]
        return (choice["message"].get("content") or "", choice.get("finish_reason"),
                (data.get("usage") or {}).get("completion_tokens") or 0, data.get("model"))
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        shown = data if isinstance(data, dict | list) else getattr(resp, "text", resp)
        raise EngineError(f"{server_url} answered without a chat completion: "
                          f"{json.dumps(shown, ensure_ascii=False)[:120]}") from None


class _Shard:
    """One HTTP connection pool, the API client over it, and its requests in flight."""

    __slots__ = ("client", "busy")

    def __init__(self, client: Any):
        self.client, self.busy = client, 0


def metric_sums(text: str, names: Collection[str]) -> dict[str, float]:
    """The samples of the metrics ``names`` in Prometheus text (``/metrics``), each summed over its labels
    (vLLM writes one line per engine); a name with no sample is absent."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            try:
                found[name] = found.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return found


def model_identity(entry: dict[str, Any]) -> str:
    """What a listed model really is: vLLM's ``root`` (its path or repo), else the name plus a
    fingerprint of llama.cpp's ``meta`` (parameters, size, vocabulary), else the name."""
    root = entry.get("root")
    if isinstance(root, str) and root:
        return root
    meta = entry.get("meta")
    if isinstance(meta, dict) and meta:
        digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:12]
        return f"{entry['id']}#{digest}"
    return str(entry["id"])
