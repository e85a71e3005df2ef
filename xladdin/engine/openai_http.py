"""Any OpenAI-compatible server: vLLM in production, llama.cpp or SGLang too.

Structured output goes as ``response_format`` json_schema (vLLM ≥ 0.12 ignores
the old ``guided_json`` keys). Thinking is switched off through
``chat_template_kwargs``. Connection errors, 408, 409, 429 and 5xx are asked again
with exponential backoff (the server's ``Retry-After`` when it gives one) up to
``retries`` times; ``timeout`` bounds the whole request, retries included, and a
timeout reports the time really waited. Every request goes through one HTTP client
(``_HTTP``, aiohttp).

The model is identified by what it is, not by the name it is served under
(every profile serves as ``qwen``): vLLM's ``/v1/models`` gives ``root``, the
model path or repo; llama.cpp gives ``meta`` (parameters, size, vocabulary).
That identity keys the cache and is each result's provenance.

Several servers of one model (``URL1,URL2``: independent vLLM replicas, on one GPU or many) are
one engine: each request goes to the server with the fewest requests in flight from here, their
load readings add up, and they must all serve the same model. A server that goes away is left
out (its requests go to the others) and asked again after ``DOWN_RETRY_S``; before a server that
was down, or was last identified more than ``IDENTIFY_S`` ago, gets a request, its model is
identified again: a server that now serves another model, or no longer lists this one, gets none
(its answers would be stored under this model's key). A run starts when at least one server is up,
naming those that are not: down (refused) or hanging (no answer within the timeout, or within
``START_GRACE_S`` of the first server that answered).

``timeout`` measures a server not answering, not a queue: a request without an answer for
``CHECK_S`` has its server checked (one check per server at a time, shared by its requests):
llama.cpp's ``/slots`` or vLLM's token counters moving are progress, and a request times out only
after ``timeout`` seconds without an answer and without progress of its server. A server that does
not answer the check (it hangs) is left out like a gone one when there are others, and its requests
go to them within what is left of their timeout. The client's window fits the server: a llama.cpp
server's slots (``/props`` ``total_slots``), so no request waits in a queue the client made.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any, ClassVar

import aiohttp

from ..errors import ConfigError, EngineError, EngineOffline, EngineRejected, EngineTimeout, OutputError
from ..settings import HTTPOptions
from .base import Engine, SamplingParams, Started

DEFAULT_PARALLEL = 32  # in flight when the server does not report its load
ADAPTIVE_CAP = 1024  # the most in flight an adapting window may reach (see xladdin.core.batcher.Window)
RETRIED = frozenset({408, 409, 429}) | frozenset(range(500, 600))  # statuses asked again (as the OpenAI SDK does)
BACKOFF_S = (0.5, 8.0)  # the first wait before asking again, doubling up to the second
_JSON = {"Content-Type": "application/json"}
_LOAD_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting")
DOWN_RETRY_S = 5.0  # a server found offline gets no request for this long
IDENTIFY_S = 10.0  # a server's model is identified again when its last identification is older
START_GRACE_S = 5.0  # at start, once one server has named its model, how long the others get
CHECK_S = 5.0  # a request without an answer this long has its server checked (at most timeout / 3)
FILE_IDENTITY = re.compile(r".+@[0-9a-f]{12}")  # a weights file's identity (``gguf_files._model_file``)
_PROGRESS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total")
log = logging.getLogger(__name__)


def response_format(schema: dict[str, Any], name: str = "result") -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def request_fields(messages: list[dict[str, str]], schema: dict[str, Any], constrained: bool) -> dict[str, Any]:
    """``messages`` and ``response_format`` of an OpenAI chat request (the embedded engine's server takes the
    same). Without constrained decoding (a server that lacks it) the schema goes into the system prompt
    instead, and the answer is only validated afterwards."""
    if constrained:
        return {"messages": messages, "response_format": response_format(schema)}
    hint = "\n\n只输出符合这个 JSON Schema 的 JSON:\n" + json.dumps(schema, ensure_ascii=False)
    first, *rest = messages
    return {"messages": [{**first, "content": first["content"] + hint}, *rest]}


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def split_urls(urls: str) -> list[str]:
    """``URL`` or ``URL1,URL2,…`` (replicas of one model) as normalised base URLs."""
    return [normalize_base_url(u.strip()) for u in urls.split(",") if u.strip()]


def credentials(urls: list[str]) -> tuple[list[str], dict[str, str]]:
    """The URLs without the user and password some carry (``http://user:pw@host/v1``), and each one's
    credentials (an Authorization header's value): a URL is shown (errors, the run's facts, the status)
    without them, as the API key is never shown; the requests to it carry them."""
    clean, auth = [], {}
    for url in urls:
        parsed = urllib.parse.urlsplit(url)
        if parsed.username is None and parsed.password is None:
            clean.append(url)
            continue
        host = parsed.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{parsed.port}" if parsed.port else "")
        bare = urllib.parse.urlunsplit(parsed._replace(netloc=netloc))
        clean.append(bare)
        pair = f"{urllib.parse.unquote(parsed.username or '')}:{urllib.parse.unquote(parsed.password or '')}"
        auth[_origin(bare)] = "Basic " + base64.b64encode(pair.encode()).decode()
    return clean, auth


def _origin(url: str) -> str:
    """scheme://host:port of ``url``: a server's credentials go with every request to it (its /metrics too)."""
    parsed = urllib.parse.urlsplit(url)
    return f"{parsed.scheme}://{parsed.netloc}"


class _HTTP:
    """The engine's one HTTP client: every request to every server (chats, listings, load, token counts)
    through one aiohttp session and its connection pool, opened on the batcher's loop at the first
    request and closed with the engine. aiohttp's pool and C HTTP parser cost the client about half the
    CPU per row of the SDK's httpx client in pools of 32 at 1,024 in flight (``python -m bench client``,
    ``bench/results/client.json``). The servers are reached directly (proxy variables are not read: a
    model server is on this machine or the LAN).

    Every request names the server it is for (``server``, its base URL); an answer counts only once the
    server has been identified by a check that started after it came (``OpenAIHTTPEngine._send``). The
    identification's own listing names no server: what answers it is what it identifies.

    Errors: a server that cannot be reached raises aiohttp's ``ClientConnectionError`` (or
    ``TimeoutError`` past ``connect``); an answer of any status is returned."""

    def __init__(self, options: HTTPOptions, auth: dict[str, str] | None = None):
        self.options = options
        self.headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        self.auth = auth or {}  # a server's origin → the user and password its URL carried
        # an aiohttp session belongs to the event loop it was opened on: one per loop that asks (the batcher's
        # loop asks everything; another loop, a caller's asyncio.run, gets a session of its own)
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}

    def session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            for other in [o for o in self._sessions if o.is_closed()]:
                del self._sessions[other]  # (its loop has ended: nothing more can run on it)
            session = self._sessions[loop] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30), headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.options.timeout), trust_env=False)
        return session

    async def request(self, method: str, url: str, server: str | None, *, body: dict[str, Any] | None = None,
                      timeout: float | None = None) -> _Answer:
        """The answer to one request for ``server`` (``None``: an identification's own listing), of any
        status; a JSON ``body`` is posted."""
        bounded = {"timeout": aiohttp.ClientTimeout(total=timeout)} if timeout else {}
        if body is not None:
            bounded.update(data=json.dumps(body, ensure_ascii=False).encode(), headers=_JSON)
        if self.auth and (basic := self.auth.get(_origin(url))) is not None:
            bounded["headers"] = {**bounded.get("headers", {}), "Authorization": basic}
        async with self.session().request(method, url, **bounded) as r:
            return _Answer(r.status, await r.read(), r.headers, r.request_info)

    async def post(self, url: str, body: dict[str, Any], server: str, timeout: float | None = None) -> _Answer:
        return await self.request("POST", url, server, body=body, timeout=timeout)

    async def get(self, url: str, timeout: float, server: str | None) -> tuple[int, str]:
        """(status, text) of a GET within ``timeout``."""
        answer = await self.request("GET", url, server, timeout=timeout)
        return answer.status, answer.text

    async def count_tokens(self, base_url: str, served: str, text: str) -> int | None:
        """A server's own count (vLLM's and llama.cpp's ``/tokenize``), else ``None``."""
        url = base_url.removesuffix("/").removesuffix("/v1") + "/tokenize"
        try:
            answer = await self.post(url, {"model": served, "prompt": text, "content": text}, base_url, 10.0)
            data = json.loads(answer.content) if answer.status == 200 else {}
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):  # not reached, or not JSON: no count
            return None
        if not isinstance(data, dict):
            return None
        if isinstance(data.get("count"), int):
            return data["count"]
        return len(data["tokens"]) if isinstance(data.get("tokens"), list) else None

    async def load(self, base_url: str) -> tuple[int, int] | None:
        """vLLM's requests (running, waiting) on one server (``/metrics``), else ``None``."""
        return (await self.metrics(base_url)).load

    async def metrics(self, base_url: str) -> _Metrics:
        """What one read of a server's ``/metrics`` says: its load, and whether it is vLLM (its token
        counters). vLLM with several HTTP front ends (``--api-server-count``) shows the load gauges only once
        its front ends have written them: started and not yet asked, it is vLLM without a load."""
        try:
            status, text = await self.get(base_url.removesuffix("/v1") + "/metrics", 2.0, base_url)
        except (aiohttp.ClientError, OSError, TimeoutError):  # not reached: no reading
            return _Metrics(None, False)
        if status != 200:
            return _Metrics(None, False)
        found = metric_sums(text, _LOAD_METRICS)
        load = (int(found.get(_LOAD_METRICS[0], 0)), int(found.get(_LOAD_METRICS[1], 0))) if found else None
        return _Metrics(load, bool(metric_sums(text, _PROGRESS)))

    async def _get_json(self, url: str, timeout: float, server: str) -> Any:
        """The JSON a GET of ``url`` answers with 200, else ``None``; the transport's errors raised."""
        status, text = await self.get(url, timeout, server)
        if status != 200:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    async def slots(self, base_url: str, timeout: float) -> int | None:
        """A llama.cpp server's slots (``/props`` ``total_slots``, else ``/slots``), else ``None``."""
        root = base_url.removesuffix("/v1")
        try:
            props = await self._get_json(root + "/props", timeout, base_url)
            if isinstance(props, dict) and isinstance(props.get("total_slots"), int) and props["total_slots"] > 0:
                return props["total_slots"]
            listed = await self._get_json(root + "/slots", timeout, base_url)
        except (aiohttp.ClientError, OSError, TimeoutError):  # not reached: no reading
            return None
        return len(listed) if isinstance(listed, list) and listed else None

    async def progress(self, base_url: str, timeout: float) -> Any:
        """What a server has done so far, as a value that changes while it works: llama.cpp's ``/slots``
        (tokens read and made per slot) or vLLM's token counters (``/metrics``); else its model listing
        answering (``None``: alive, progress unknown). Raises the transport's error when it does not
        answer."""
        root = base_url.removesuffix("/v1")
        listed = await self._get_json(root + "/slots", timeout, base_url)
        if isinstance(listed, list):
            return tuple((s.get("id_task"), s.get("n_prompt_tokens_processed"),
                          sum(t.get("n_decoded", 0) for t in s.get("next_token") or () if isinstance(t, dict)))
                         for s in listed if isinstance(s, dict))
        status, text = await self.get(root + "/metrics", timeout, base_url)
        found = metric_sums(text, _PROGRESS) if status == 200 else {}
        if found:
            return tuple(sorted(found.items()))
        await self.get(base_url + "/models", timeout, base_url)
        return None

    async def aclose(self) -> None:
        """Close this loop's session now, and a session of another loop still running on that loop."""
        here = asyncio.get_running_loop()
        sessions, self._sessions = self._sessions, {}
        for loop, session in sessions.items():
            if loop is here:
                await session.close()
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(session.close(), loop)


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    content: bytes
    headers: Any
    asked: Any  # aiohttp's RequestInfo: what was asked (the cause of a status error names it)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class _Metrics:
    load: tuple[int, int] | None  # requests (running, waiting), when the server says
    vllm: bool  # vLLM's token counters are there


class _Replicas:
    """Which servers may get a request: up (or down for longer than ``DOWN_RETRY_S``) and serving the
    engine's model, as last identified."""

    def __init__(self, urls: list[str]):
        self.urls = urls
        self.busy = [0] * len(urls)  # requests in flight per server
        self.answered = [0] * len(urls)  # answers per server
        self.down: dict[int, float] = {}  # server → when it was found offline (or hanging)
        self.why: dict[int, str] = {}  # server → why it is down, when it hangs
        self.wrong: dict[int, str] = {}  # server → the other model it serves now
        self.identified = [0.0] * len(urls)  # when each server's model was last identified
        self.identifying: dict[int, tuple[float, asyncio.Future]] = {}  # server → (started, check)
        self.progressed = [0.0] * len(urls)  # when each server last answered or showed progress
        self.marks: list[Any] = [None] * len(urls)  # what each server had done at its last check
        self.checking: dict[int, asyncio.Future] = {}  # server → its check in progress

    def down_urls(self) -> str:
        return ", ".join(self.urls[i] + (f" ({self.why[i]})" if i in self.why else "") for i in sorted(self.down))

    def set_down(self, i: int, why: str | None = None) -> None:
        self.down[i] = time.monotonic()
        if why:
            self.why[i] = why
        else:
            self.why.pop(i, None)

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
        while self.identified[i] < after:  # a check that started earlier is waited for, then one more
            running = self.identifying.get(i)  # covers every request that waited meanwhile (one per wave)
            if running is None:
                running = self.identifying[i] = (time.monotonic(), asyncio.ensure_future(check()))
            started, future = running
            try:
                model = await asyncio.shield(future)
            except (EngineOffline, EngineTimeout):
                raise
            except EngineError as e:  # no longer lists the model (or lists nothing readable): its answers are
                self.wrong[i] = getattr(e, "serves", None) or "an unknown model"  # not this model's, for good
                log.warning("%s: it gets no more requests", e)
                raise
            finally:
                if self.identifying.get(i) is running:
                    del self.identifying[i]
            self.identified[i] = max(self.identified[i], started)
            self.down.pop(i, None)
            self.why.pop(i, None)
            if model != model_id:
                if i not in self.wrong:
                    log.warning("%s now serves %s, not %s: it gets no more requests", self.urls[i], model,
                                model_id)
                self.wrong[i] = model
                return

    async def check(self, i: int, probe: Callable[[], Awaitable[Any]]) -> None:
        """Whether server ``i`` is working (one ``probe`` at a time, shared): progress moves
        ``progressed[i]``; a server that does not answer raises the transport's error."""
        running = self.checking.get(i)
        if running is None:
            running = self.checking[i] = asyncio.ensure_future(probe())
        try:
            mark = await asyncio.shield(running)
        finally:
            if self.checking.get(i) is running:
                del self.checking[i]
        if mark is None:
            return
        previous, self.marks[i] = self.marks[i], mark
        if previous is not None and mark != previous:
            self.progressed[i] = time.monotonic()


class OpenAIHTTPEngine(Engine):
    kind: ClassVar[str] = "openai_http"
    options_model = HTTPOptions

    def __init__(self, options: HTTPOptions):
        self.options = options
        self.structured_output = options.structured_output
        if not self.options.url:
            raise ConfigError("the openai_http engine needs a URL: set XLADDIN_ENGINE_URL or --engine-url")
        self.urls, auth = credentials(split_urls(self.options.url))
        if auth and self.options.api_key:
            raise ConfigError("the engine URL carries a user and password and an API key is set too: give the "
                              "server's credentials one way")
        self.server_url: str = ",".join(self.urls)  # what the server (or replicas) is known by
        self.max_parallel = self.options.max_parallel or DEFAULT_PARALLEL
        self.parallel_limit, self.timeout = self.options.max_parallel, self.options.timeout  # (retries within it)
        self._http = _HTTP(self.options, auth)
        self.replicas = _Replicas(self.urls)
        self.down, self.wrong, self.answered = self.replicas.down, self.replicas.wrong, self.replicas.answered
        self.completion_tokens = 0  # generated, as the server counts them (benchmarks report it per row)
        self.served = self.options.served_model or ""  # the name requests use
        self.max_model_len: int | None = None

    async def _bounded(self, call: Awaitable[Any], url: str, timeout: float | None = None) -> Any:
        """Await ``call`` within ``timeout`` (default: the engine's); the transport's errors become the
        ``EngineError`` naming ``url``."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout or self.options.timeout):
                return await call
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise transport_error(e, url, started) from e

    def _check_s(self) -> float:
        return min(CHECK_S, self.options.timeout / 3)

    async def start(self) -> Started:
        if self.model_id and self.served:
            return self.started()  # (a model id remembered for an offline server has no served name yet)
        listed = await self._list_all()
        if self.down:
            log.warning("servers down, their share goes to the others: %s", self.replicas.down_urls())
        found = set(listed.values())
        if len(found) > 1:
            raise EngineError(f"the servers {self.server_url} serve different models: "
                              + "; ".join(f"{name} = {model}" for name, model, _ in sorted(found, key=str)))
        self.served, self.model_id, self.max_model_len = found.pop()
        now = time.monotonic()
        for i in listed:
            self.replicas.identified[i] = now
        self.context_tokens = self.max_model_len
        if self.options.max_parallel is None:
            readings = [await self._http.metrics(self.urls[i]) for i in sorted(listed)]  # one read each
            if all(r.load is not None for r in readings):  # the batcher adapts within this
                self.reports_load, self.max_parallel = True, ADAPTIVE_CAP * len(self.urls)
            elif all(r.vllm and r.load is None for r in readings):
                # vLLM that cannot say its load (several front ends): as many in flight as the adaptive window
                # reaches, fixed (on one H200 the whole pool ran at 1,024 in flight as fast as adapting)
                self.max_parallel = ADAPTIVE_CAP * len(self.urls)
            else:  # a llama.cpp server says its slots: that many in flight, none queued by the client
                slots = [await self._http.slots(self.urls[i], self._check_s()) for i in sorted(listed)]
                if all(slots):
                    self.max_parallel = max(1, sum(slots) * len(self.urls) // len(slots))  # type: ignore[arg-type]
        return self.started()

    async def _list_all(self) -> dict[int, tuple[str, str, int | None]]:
        """Every server's listing, asked at once. Once one has answered the others get ``START_GRACE_S``
        more; a server that refuses, or hangs past that or the timeout, is down (named), unless it is
        the only one."""
        calls = {asyncio.ensure_future(self._listed(i)): i for i in range(len(self.urls))}
        pending, listed, errors = set(calls), {}, {}
        until: float | None = None
        started = time.monotonic()
        try:
            while pending:
                wait = None if until is None else max(0.0, until - time.monotonic())
                done, pending = await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    break
                for call in done:
                    error = call.exception()
                    if error is None:
                        listed[calls[call]] = call.result()
                    elif isinstance(error, EngineOffline | EngineTimeout) and len(self.urls) > 1:
                        errors[calls[call]] = error
                    else:
                        raise error
                if listed and until is None:
                    until = time.monotonic() + min(START_GRACE_S, self.options.timeout)
        finally:
            for call in pending:
                call.cancel()
        for call in pending:
            url = self.urls[calls[call]]
            errors[calls[call]] = EngineTimeout(f"engine timeout after {time.monotonic() - started:.0f}s ({url})",
                                                url=url)
        for i, error in errors.items():
            self.replicas.set_down(i, None if isinstance(error, EngineOffline) else "not answering")
        if not listed:
            kind = EngineTimeout if any(isinstance(e, EngineTimeout) for e in errors.values()) else EngineOffline
            what = "engine timeout" if kind is EngineTimeout else "engine offline"
            raise kind(f"{what} ({self.server_url}): none of the servers answers — "
                       + "; ".join(str(errors[i]) for i in sorted(errors)))
        return listed

    async def _listed(self, i: int, timeout: float | None = None) -> tuple[str, str, int | None]:
        """(served name, model identity, context length) of the model server ``i`` serves."""
        url, started = self.urls[i], time.monotonic()
        # bounded as a whole, retries included (no bound of aiohttp's own inside: its timer and this one firing
        # together, the outer one's cancellation is taken for aiohttp's and lost)
        answer = await self._bounded(self._retrying(i, lambda: self._http.request("GET", url + "/models", None),
                                                    started), url, timeout)
        if answer.status in RETRIED:  # (a proxy while the server restarts): down for a while, not another model
            error = EngineOffline(f"engine offline ({url}): /models answered {answer.status}", url=url)
            error.__cause__ = status_error(answer, url).__cause__
            raise error
        if answer.status != 200:
            raise status_error(answer, url)
        return listed_model(answer.text, url, self.served)

    async def _identify(self, i: int, after: float | None = None) -> None:
        async def check() -> str:  # with other servers to go to, one that hangs is not waited for long
            return (await self._listed(i, self._check_s() if len(self.urls) > 1 else None))[1]

        await self.replicas.identify(i, check, self.model_id, after)

    async def count_tokens(self, text: str) -> int | None:
        """The server's own count (vLLM's and llama.cpp's ``/tokenize``), else ``None``."""
        up = self.replicas.usable(set()) or [0]
        return await self._http.count_tokens(self.urls[up[0]], self.served, text)

    async def server_load(self) -> tuple[int, int] | None:
        """vLLM's requests running and waiting (``/metrics``, summed over engines and servers),
        else ``None``."""
        readings = [await self._http.load(self.urls[i]) for i in self.replicas.usable(set()) or [0]]
        if any(r is None for r in readings):
            return None
        return sum(r[0] for r in readings), sum(r[1] for r in readings)  # type: ignore[index]

    def _not_used(self, i: int) -> EngineError:
        return EngineError(f"{self.urls[i]} now serves {self.wrong[i]}, not {self.model_id}: its answers are "
                           "not used (restart xladdin to use the new model)", url=self.urls[i])

    async def complete(self, messages: list[dict[str, str]], schema: dict[str, Any], params: SamplingParams) -> str:
        if not self.served:
            await self.start()
        body = chat_body(self.served, messages, schema, params, self.structured_output)
        tried: set[int] = set()
        deadline: list[float] = [time.monotonic() + self.options.timeout]  # moved on by the server's progress
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
                data = await self._send(i, body, deadline)
            except (EngineOffline, _Hanging) as e:
                self.replicas.set_down(i, "not answering" if isinstance(e, _Hanging) else None)
                if len(self.urls) > 1:
                    log.warning("%s is %s: its requests go to the other servers", self.urls[i],
                                "not answering" if isinstance(e, _Hanging) else "offline")
                if isinstance(e, _Hanging) and not self.replicas.usable(tried):
                    raise e.timeout from None
                continue
            except EngineTimeout:
                if len(self.urls) == 1 or not self.replicas.usable(tried):
                    raise
                # it stalled (its identification hung, or it took the request and made no progress): out of
                # the rotation, and the request goes to another server with a timeout of its own
                self.replicas.set_down(i, "stalled")
                log.warning("%s stalled (no progress for %gs): its requests go to the other servers", self.urls[i],
                            self.options.timeout)
                deadline[0] = time.monotonic() + self.options.timeout
                continue
            break
        content, finish, tokens, answered_by = chat_answer(data, self.urls[i])
        if answered_by not in (None, self.served, self.model_id):  # a proxy that sent it to another model
            raise EngineError(f"{self.urls[i]} answered as {answered_by!r}, not {self.served!r}: the answer is "
                              "not used", url=self.urls[i])
        self.completion_tokens += tokens
        if finish == "length":
            raise OutputError(f"answer cut at max_tokens={params.max_tokens}")
        return content

    async def _send(self, i: int, body: dict[str, Any], deadline: list[float]) -> Any:
        """The chat completion server ``i`` answers (its JSON). Waits until
        ``deadline[0]``, which the server's progress moves on (``_wait``)."""
        self.replicas.busy[i] += 1
        sent = time.monotonic()
        post = asyncio.ensure_future(self._post(i, body, sent))
        try:
            data = await self._wait(i, post, sent, deadline)
        finally:
            self.replicas.busy[i] -= 1
            if not post.done():
                post.cancel()
        # an answer counts only once the server is identified by a check that started after it came: a server
        # replaced at its URL, or a router that sends a kept-alive connection's requests to another model
        # under the same served name, is caught before its answer is stored under this model's key (requests
        # answered while a check runs share the next one: one /models per wave of answers)
        await self._identify(i, after=time.monotonic())
        if i in self.wrong:
            raise self._not_used(i)
        self.answered[i] += 1
        self.replicas.progressed[i] = self.last_progress = time.monotonic()
        return data

    async def _post(self, i: int, body: dict[str, Any], sent: float) -> Any:
        """POST the chat to server ``i`` (``_retrying``): its JSON, or the ``EngineError`` of the last try (the
        transport's error as its cause)."""
        url = self.urls[i]
        answer = await self._retrying(i, lambda: self._http.post(url + "/chat/completions", body, url), sent)
        if answer.status != 200:
            raise status_error(answer, url)
        try:
            return json.loads(answer.content)
        except ValueError:
            raise EngineError(f"{url} answered without a chat completion: "
                              f"{answer.content[:120].decode('utf-8', 'replace')!r}", url=url) from None

    async def _retrying(self, i: int, send: Callable[[], Awaitable[_Answer]], started: float) -> _Answer:
        """``send()`` to server ``i``, sent again after a connection error or a status in ``RETRIED``
        (``retries`` times, backoff from ``BACKOFF_S``, or the server's ``Retry-After`` up to 60 s): the last
        answer, of any status; not reached on the last try, its ``EngineOffline`` or ``EngineTimeout``."""
        for attempt in range(self.options.retries + 1):
            last = attempt == self.options.retries
            wait = min(BACKOFF_S[0] * 2 ** attempt, BACKOFF_S[1])
            try:
                answer = await send()
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                if last:
                    raise transport_error(e, self.urls[i], started) from e
                await asyncio.sleep(wait)
                continue
            if answer.status in RETRIED and not last:
                await asyncio.sleep(_retry_after(answer.headers, wait))
                continue
            return answer
        raise AssertionError("unreachable")  # the last attempt returns or raises

    async def _wait(self, i: int, post: asyncio.Future, sent: float, deadline: list[float]) -> Any:
        """``post``'s response; every ``_check_s`` without it, server ``i`` is checked: its progress moves
        the deadline to ``timeout`` after it, and a server that does not answer the check is ``_Hanging``
        (when there are others to go to)."""
        check_s = self._check_s()
        while True:
            now = time.monotonic()
            if now >= deadline[0]:
                raise EngineTimeout(f"engine timeout after {now - sent:.0f}s ({self.urls[i]})", url=self.urls[i])
            done, _ = await asyncio.wait({post}, timeout=min(check_s, deadline[0] - now))
            if done:
                return post.result()
            try:
                await self.replicas.check(i, lambda: self._http.progress(self.urls[i], check_s))
            except Exception:  # the transport's errors: the server does not answer even a check
                if len(self.urls) > 1:
                    raise _Hanging(EngineTimeout(f"engine timeout after {time.monotonic() - sent:.0f}s "
                                                 f"({self.urls[i]}: not answering)", url=self.urls[i])) from None
                continue
            if self.replicas.progressed[i] > sent:  # the server works: the timeout counts from its progress
                self.last_progress = max(self.last_progress, self.replicas.progressed[i])
                deadline[0] = max(deadline[0], self.replicas.progressed[i] + self.options.timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    def describe(self) -> str:
        shown = self.served if self.served == self.model_id or not self.served else f"{self.served} = {self.model_id}"
        down = f" (down: {self.replicas.down_urls()})" if self.down else ""
        wrong = "".join(f" ({self.urls[i]} serves {m})" for i, m in self.wrong.items())
        return f"{shown or '(model not yet known)'} at {self.server_url}{down}{wrong}"


def transport_error(e: BaseException, server_url: str, started: float) -> EngineError:
    """A request that got no answer (the server not reached, or not in time) as the engine error a row shows."""
    if isinstance(e, TimeoutError | aiohttp.ServerTimeoutError):
        return EngineTimeout(f"engine timeout after {time.monotonic() - started:.0f}s ({server_url})", url=server_url)
    if isinstance(e, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):  # reached, not trusted
        why = getattr(getattr(e, "certificate_error", None), "verify_message", None) or "its certificate failed"
        return EngineError(f"{server_url}: its TLS certificate is not trusted ({why}): point SSL_CERT_FILE at the "
                           "certificate of its CA (a self-signed server: its own .pem), or reach it over http://",
                           url=server_url)
    return EngineOffline(f"engine offline ({server_url})", url=server_url)


def status_error(answer: _Answer, server_url: str) -> EngineError:
    """An answer of an error status as the engine error a row shows; aiohttp's ``ClientResponseError`` for
    that status and request is its cause (what the transport says of it, for a traceback)."""
    status, content = answer.status, answer.content
    if status == 401:
        error = EngineError(f"API key rejected by {server_url} — set XLADDIN_API_KEY", url=server_url)
    else:
        detail = error_detail(content)
        # a request the server refused (too long for its context, malformed): that row's, not the engine's
        kind = EngineRejected if status in (400, 413, 422) else EngineError
        error = kind(f"engine error {status} ({server_url}): {detail[:200]}", url=server_url)
    error.__cause__ = aiohttp.ClientResponseError(answer.asked, (), status=status, message=str(error))
    return error


def error_detail(content: bytes) -> str:
    """What an error answer says: the message of an OpenAI-style error object (``{"error": {"message"}}``),
    or a ``message``/``detail``, else the body's text."""
    text = content.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())
    if isinstance(data, dict):
        inner = data.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        for key in ("message", "detail", "error"):
            if isinstance(data.get(key), str):
                return data[key]
    return " ".join(text.split())


def _retry_after(headers: Any, default: float) -> float:
    """The wait a ``Retry-After`` header asks for, when it is more than 0 and at most 60 seconds (as the
    OpenAI SDK reads it), else ``default``."""
    try:
        asked = float(headers.get("Retry-After", ""))
    except (TypeError, ValueError):
        return default
    return asked if 0 < asked <= 60 else default


def listed_model(text: str, url: str, served: str) -> tuple[str, str, int | None]:
    """(served name, model identity, context length) from a server's ``/models`` listing: the model
    ``served``, or its first."""
    try:
        models = {m["id"]: m for m in json.loads(text)["data"]}
    except (ValueError, KeyError, TypeError):
        snippet = " ".join(text.split())[:80]
        raise EngineError(f"{url}/models did not list models as JSON: {snippet!r} — is "
                          "this an OpenAI-compatible server?", url=url) from None
    if not models:
        raise EngineError(f"{url} serves no model", url=url)
    name = served or next(iter(models))
    if name not in models:
        error = EngineError(f"{url} does not serve {name!r}; it serves {', '.join(models)}", url=url)
        error.serves = ", ".join(models)  # type: ignore[attr-defined]
        raise error
    return name, model_identity(models[name]), models[name].get("max_model_len")


def chat_body(served: str, messages: list[dict[str, str]], schema: dict[str, Any], params: SamplingParams,
              structured: bool) -> dict[str, Any]:
    return {"model": served, "temperature": params.temperature, "seed": params.seed,
            "max_tokens": params.max_tokens, "chat_template_kwargs": {"enable_thinking": False},
            **request_fields(messages, schema, structured)}


def chat_answer(data: Any, server_url: str) -> tuple[str, str | None, int, str | None]:
    """(content, finish reason, completion tokens, the model named in it) of a chat completion's JSON."""
    try:
        choice = data["choices"][0]
        return (choice["message"].get("content") or "", choice.get("finish_reason"),
                (data.get("usage") or {}).get("completion_tokens") or 0, data.get("model"))
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        shown = data if isinstance(data, dict | list) else str(data)
        raise EngineError(f"{server_url} answered without a chat completion: "
                          f"{json.dumps(shown, ensure_ascii=False)[:120]}", url=server_url) from None


class _Hanging(Exception):
    """A server that accepted a request and answers nothing, not even a check (``timeout``: its row's
    error when there is no other server to go to)."""

    def __init__(self, timeout: EngineTimeout):
        super().__init__(str(timeout))
        self.timeout = timeout


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
    """What a listed model really is: vLLM's ``root`` (its path or repo); a name that is already a weights
    file's identity (``gguf_files``: its stem and the fingerprint of its bytes, as xladdin's CPU server names
    the model it serves: the embedded engine's own id, so an answer cached by either is the other's); else the
    name plus a fingerprint of llama.cpp's ``meta`` (parameters, size, vocabulary), else the name."""
    root = entry.get("root")
    if isinstance(root, str) and root:
        return root
    if FILE_IDENTITY.fullmatch(str(entry.get("id", ""))):
        return str(entry["id"])
    meta = entry.get("meta")
    if isinstance(meta, dict) and meta:
        digest = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:12]
        return f"{entry['id']}#{digest}"
    return str(entry["id"])
