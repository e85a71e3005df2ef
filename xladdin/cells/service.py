"""The cell service: the worksheet functions over HTTPS for the Office and WPS add-ins, through one
process-wide ``CellRuntime`` (the same runtime, cache and engine as the Excel UDFs and Calc).

``POST /api/calls`` takes a batch ``{"calls": [{"fn": "QWEN_SCREEN", "args": [...]}, …]}`` and answers
each call at once: ``{"state": "done" | "error", "value": …}`` (from memory or the cache; an error is a
``#QWEN! …`` value) or ``{"state": "pending", "id": …}`` (waiting for the engine, or not yet run when
the POST's ``ANSWER_BUDGET`` was spent: a large POST answers without waiting for all of its calls).
``POST /api/settle`` with ``{"ids": […]}`` waits (a long poll, ``wait`` seconds at most) until some of
them settle and returns them, with the ids still pending; with ``"stream": true`` it answers JSON lines
(``application/x-ndjson``), each the calls settled since the last, as they settle, the last one ``end``
with those still pending: the ids are sent once, not again on every poll. A pending call is watched by
the runtime as a waiting cell is in Excel: when its answers arrive the runtime gives the service its
value made from them (``recalculate``; the call is not run again). The same call from any client is one
call (its id is its function and arguments); once settled with a value that cannot go stale
(``_lasting``), it is answered from the service's memory without running it.

Every request is bounded: its size (413), calls per request (413), the calls remembered by count and by
bytes (``MAX_KEPT``, ``MAX_KEPT_BYTES``), a stream whose reader takes nothing dropped (``STALL_S``), JSON
it cannot take (400: not JSON, ``NaN``, nested deeper than ``MAX_DEPTH``), requests per second per client
(429 with Retry-After);
``/api`` needs the key when one is set (always when bound beyond loopback), checked before anything else
costs (a request without it takes nothing from the rate bucket, which is the key's, else the client
address's), and a browser's request from any origin but the add-in's own is refused (403). Every
connection is bounded: a TLS handshake finishes within ``HANDSHAKE_TIMEOUT``, a request's headers arrive
within ``IDLE_TIMEOUT`` of the connection's start or its last answer (and an idle connection is closed
after as long), and at most ``MAX_CONNECTIONS`` are open, counted from the accept (those in their handshake
too) and below the open-file limit (``open_bounds``), ``MAX_PER_CLIENT`` of them from one address beyond
this machine: a new one closes the oldest that is in its handshake, else idle (``_Site``). The add-in's
files are served under ``/addin/`` (``functions.json`` and the manifests made from the function table;
WPS's page, ``wps/index.html``, at its folder's URL ``/addin/wps/``)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hmac
import ipaddress
import json
import logging
import os
import ssl
import threading
import time
from asyncio import sslproto
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from ..core import on_serial_thread
from ..errors import ConfigError
from ..reading.documents import looks_like_path
from ..settings import loopback
from ..sheet import functions
from ..sheet.functions import CellRuntime, metadata
from . import calls, manifests

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
MAX_REQUEST_BYTES = 8 << 20
MAX_CALLS_PER_REQUEST = 5000
MAX_KEPT = 100_000  # settled calls remembered for a poll that comes later …
MAX_KEPT_BYTES = 256 << 20  # … and the bytes of their arguments and values at most
STALL_S = 10.0  # a stream whose reader takes no part for this long is dropped (its memory with it)
DRAINED_BYTES = 1 << 20  # what a stream may leave unsent after a part (more, for STALL_S: a reader that stalls)
DRAIN_POLL_S = 0.05  # how often a stream looks whether its reader took its last part
MAX_WAIT = 30.0  # seconds a poll is held at most
GATHER = 0.05  # after the first call settles, a poll waits this long for others to settle with it …
GATHER_PER_ID = 0.0001  # … and this long more for each id it asks (its round trip costs each id) …
MAX_GATHER = 0.5  # … at most this long: a large recalculation's cells still fill twice a second
ANSWER_BUDGET = 0.2  # seconds a POST runs its calls; those left then answer pending and run off the request
MAX_DEPTH = 16  # JSON nesting: a call is {"calls": [{"fn", "args": [range [row [cell]]]}]}, 6 deep
IDLE_TIMEOUT = 15.0  # seconds a connection may wait for a request's headers, or idle between requests
HANDSHAKE_TIMEOUT = 10.0  # seconds a TLS handshake may take
MAX_CONNECTIONS = 100  # open connections, those in their TLS handshake included (macOS gives a process 256
MIN_CONNECTIONS = 4  # open files by default) … at most, and at least this many whatever the open-file limit
MAX_PER_CLIENT = 32  # … from one address beyond this machine (a browser opens 6 to a host)
FILES_KEPT = 64  # descriptors left under the open-file limit for the process's other files
BACKLOG = 128  # connections the system queues for the service, and asyncio accepts at once


def _json_error(status: int, message: str, **headers: str):
    return web.json_response({"error": message}, status=status, headers=headers)


@dataclass
class Entry:
    """One distinct call: its function and arguments, and its last value once it has settled (``settles``:
    how many times it has)."""

    fn: Any
    args: list[Any]
    settled: bool = False
    value: Any = None
    at: float = field(default_factory=time.monotonic)
    settles: int = 0
    lasting: bool = False  # its value cannot go stale: answered from memory once settled (``_lasting``)
    args_size: int = 0  # bytes its arguments take as JSON, about (``_size``)
    size: int = 0  # … with its value's: what ``MAX_KEPT_BYTES`` counts


def _size(value: Any) -> int:
    """About the bytes ``value`` (a call's arguments or value: JSON's kinds) takes as JSON."""
    try:
        return len(_dumps(value))
    except (TypeError, ValueError):
        return 64


def _lasting(fn: Any, args: list[Any]) -> bool:
    """Whether a call's settled value stays its answer: not ``QWEN_STATUS`` (the runtime's state now), and
    no argument names a report file (its answer follows the file: asked again, the runtime looks)."""
    if fn.name == "QWEN_STATUS":
        return False
    stack: list[Any] = [args]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str) and looks_like_path(v):
            return False
    return True


def gather_for(ids: int) -> float:
    """How long a poll of ``ids`` ids waits, after its first call settles, for others to settle with it:
    a poll and its answer carry every id it asks, so a large one gathers longer (fewer round trips, each
    one's cost spread over more settled calls); the last of its calls to settle answers it at once."""
    return min(MAX_GATHER, GATHER + GATHER_PER_ID * ids)


class _Poll:
    """A held poll: the ids it waits for, those settled since it last looked (id, value), and its wake
    (set on the service's loop when it has heard of one, or the service stops)."""

    __slots__ = ("ids", "heard", "woken", "gathering", "left")

    def __init__(self, ids: list[str]):
        self.ids = dict.fromkeys(ids)  # each once, in order
        self.heard: list[tuple[str, Any]] = []
        self.woken = asyncio.Event()
        self.gathering = False  # asleep until its answer: what it hears needs no wake, but its last
        self.left = len(self.ids)  # calls it has not heard of (a call settled twice counts twice: a spare wake)


class Bucket:
    """Requests per second per client: ``rate`` a second, ``burst`` at once."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst = rate, burst
        self._tokens: dict[str, tuple[float, float]] = {}

    def take(self, client: str) -> float:
        """0 when the request may go, else the seconds until it may."""
        now = time.monotonic()
        tokens, last = self._tokens.get(client, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens < 1:
            self._tokens[client] = (tokens, now)
            return (1 - tokens) / self.rate
        self._tokens[client] = (tokens - 1, now)
        return 0.0




class CellService:
    """The calls of every client, on one runtime. ``runtime`` is made from the user's settings unless
    given (its ``settle`` becomes this service's)."""

    def __init__(self, runtime: CellRuntime | None = None, *, host: str = "127.0.0.1", port: int = 8443,
                 key: str | None = None, origins: tuple[str, ...] = (), rate: float = 50.0, burst: int = 200,
                 max_request_bytes: int = MAX_REQUEST_BYTES, max_calls: int = MAX_CALLS_PER_REQUEST,
                 max_connections: int = MAX_CONNECTIONS, idle_timeout: float = IDLE_TIMEOUT,
                 answer_budget: float = ANSWER_BUDGET):
        if not (0 < rate <= 10_000 and 1 <= burst <= 100_000):
            raise ConfigError(f"the rate is 0 < rate ≤ 10000 requests a second (given {rate:g}), the burst 1 to 100000")
        if not (1 <= max_connections <= 10_000 and 0 < idle_timeout <= 3600):
            raise ConfigError(f"the connections are 1 to 10000 (given {max_connections}), the idle timeout 0 to "
                              f"3600 s (given {idle_timeout:g})")
        if not loopback(host) and not key:
            raise ConfigError(f"bound to {host} (beyond this machine) the cell service needs a key: "
                              "set XLADDIN_CELLS_KEY in its environment")
        self.runtime = runtime or CellRuntime()
        self.runtime.told = self.recalculate
        self.host, self.port, self.key = host, port, key
        self.extra_origins = origins
        self.bucket = Bucket(rate, burst)
        self.max_request_bytes, self.max_calls = max_request_bytes, max_calls
        self.max_connections, self.idle_timeout = max_connections, idle_timeout
        self.answer_budget = answer_budget
        self._entries: collections.OrderedDict[str, Entry] = collections.OrderedDict()
        self._kept_bytes = 0  # what the entries take (``Entry.size``), bounded by MAX_KEPT_BYTES
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._polls: set[_Poll] = set()  # the polls held now, each told of the calls that settle
        self._waking = False  # one wake of the held polls at a time, however many calls settle meanwhile
        self._answered: list[tuple[str, Callable[[], Any]]] = []  # calls to settle with their answers' value
        self._finishing = False  # a worker settles them
        self._pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="xladdin-cells")
        self._later = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xladdin-cells-later")
        self.stopping = False
        self.counts = collections.Counter()  # requests, calls, pending, settled, polls

    # -- origins --------------------------------------------------------------------------------
    def origins(self) -> set[str]:
        port = "" if self.port == 443 else f":{self.port}"
        own = {f"https://localhost{port}", f"https://127.0.0.1{port}", f"https://[::1]{port}"}
        if not loopback(self.host) and self.host not in ("0.0.0.0", "::"):
            own.add(f"https://{self.host}{port}")
        return own | set(self.extra_origins)

    # -- calls ----------------------------------------------------------------------------------
    def answer(self, batch: list[Any]) -> list[dict[str, Any]]:
        """Each call's value now, or pending (runs on a worker thread: the bodies are synchronous). A
        call settled with a value that cannot go stale is answered from memory; the others are run for
        ``answer_budget`` seconds, and what is left then answers pending at once and is run off the
        request (a large recalculation's POST does not wait for all of its calls)."""
        out = []
        deadline = time.monotonic() + self.answer_budget
        asks = any(not (isinstance(c, dict) and str(c.get("fn", "")).upper() == "QWEN_STATUS") for c in batch)
        if asks and not self.runtime.started_within(self.answer_budget):  # loading a model: every call but
            deadline = 0.0  # the status is left for later, where the start is waited for (``CellRuntime.later``)
        later: list[str] = []
        for item in batch:
            try:
                if not isinstance(item, dict):
                    raise calls.CallError("a call is {\"fn\": NAME, \"args\": [...]}")
                fn = calls.function(item.get("fn"))
                args = item.get("args", [])
                if not isinstance(args, list):
                    raise calls.CallError(f"{fn.name}: args must be a list")
                cid = calls.call_id(fn.name, args)
            except (calls.CallError, TypeError, ValueError) as e:
                error = e if isinstance(e, calls.CallError) else calls.CallError(f"a call's arguments: {e}")
                out.append({"state": "error", "value": functions.error_value(error)})
                continue
            with self._lock:
                entry = self._entries.get(cid)
                if entry is None:
                    sized = _size(args)
                    entry = self._entries[cid] = Entry(fn, args, lasting=_lasting(fn, args), args_size=sized,
                                                       size=sized)
                    self._kept_bytes += entry.size
                    self._trim()
                settles = entry.settles
                kept = entry.settled and entry.lasting and not calls.is_error(entry.value)
            self.counts["calls"] += 1
            if kept:
                self.counts["memory"] += 1
                out.append(self._result(entry.value))
                continue
            if time.monotonic() >= deadline and fn.name != "QWEN_STATUS":  # the status is never waited for
                self._unsettle(entry, settles)
                later.append(cid)
                self.counts["pending"] += 1
                out.append({"state": "pending", "id": cid})
                continue
            with self.runtime.reads_within(deadline - time.monotonic()):  # the POST's time is all its calls'
                value = calls.evaluate(self.runtime, fn, args, cid)
            if value is calls.WAITING:
                self.counts["pending"] += 1
                self._unsettle(entry, settles)
                out.append({"state": "pending", "id": cid})
            else:
                self._settle(cid, value)
                out.append(self._result(value))
        if later:
            try:
                self._later.submit(self._run_later, later)
            except RuntimeError:  # the service is closing: its polls answer stopping
                pass
        return out

    def _unsettle(self, entry: Entry, settles: int) -> None:
        """A call asked again (its error's time over, or left for later): its old value is no answer to
        this call, so a poll waits for the new outcome, unless that has settled it meanwhile."""
        with self._lock:
            if entry.settles == settles:
                entry.settled, entry.value = False, None

    def _run_later(self, ids: list[str]) -> None:
        """The calls a POST left for later (it answered them pending), their disk reads not waited for."""
        with self.runtime.later():
            for cid in ids:
                self._run(cid)

    def _run(self, cid: str) -> None:
        """The call ``cid`` run (again); settled unless still pending, when the runtime's recalculation
        of it comes later."""
        with self._lock:
            entry = self._entries.get(cid)
        if entry is None:
            return
        value = calls.evaluate(self.runtime, entry.fn, entry.args, cid)
        if value is not calls.WAITING:
            self.counts["settled"] += 1
            self._settle(cid, value)

    def _finish_answered(self) -> None:
        """The calls whose answers have arrived (``recalculate``), each settled with its value made from them,
        until none is left."""
        while True:
            with self._lock:
                answered, self._answered = self._answered, []
                if not answered:
                    self._finishing = False
                    return
            for cid, value in answered:
                self._finish(cid, value)

    def _finish(self, cid: str, value: Callable[[], Any]) -> None:
        """The call ``cid`` settled with its value made from its answers (``value``)."""
        with self._lock:
            entry = self._entries.get(cid)
        if entry is not None:
            self.counts["settled"] += 1
            self._settle(cid, calls.finished(self.runtime, entry.fn, value))

    @staticmethod
    def _result(value: Any) -> dict[str, Any]:
        return {"state": "error" if calls.is_error(value) else "done", "value": value}

    def _trim(self) -> None:
        """The oldest settled calls forgotten while more than ``MAX_KEPT`` are kept or their bytes pass
        ``MAX_KEPT_BYTES`` (a call waited on is never forgotten)."""
        looked = 0
        while (len(self._entries) > MAX_KEPT or self._kept_bytes > MAX_KEPT_BYTES) and looked < len(self._entries):
            oldest, entry = next(iter(self._entries.items()))
            looked += 1
            if not entry.settled:
                self._entries.move_to_end(oldest)
                continue
            del self._entries[oldest]
            self._kept_bytes -= entry.size

    def _settle(self, cid: str, value: Any) -> None:
        with self._lock:
            entry = self._entries.get(cid)
            if entry is None:
                return
            entry.settled, entry.value, entry.at = True, value, time.monotonic()
            entry.settles += 1
            grown = entry.args_size + _size(value) - entry.size
            entry.size += grown
            self._kept_bytes += grown
            if self._kept_bytes > MAX_KEPT_BYTES:
                self._trim()
            wake = False
            for poll in self._polls:
                if cid in poll.ids:
                    poll.heard.append((cid, value))
                    poll.left -= 1
                    wake = wake or not poll.gathering or poll.left <= 0
            if self._waking or not wake:  # a wake is on its way (it will see this one too), or none is needed
                return
            self._waking = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._notify)

    def _notify(self) -> None:
        """On the service's loop: the held polls that have heard of a settled call woken (``_settle`` asks for
        a wake only where a poll waits for its first call, or a gathering one has heard of its last)."""
        with self._lock:
            self._waking = False  # what settles from now on wakes the polls again
            told = [poll for poll in self._polls if poll.heard]
        for poll in told:
            poll.woken.set()

    def recalculate(self, settled: concurrent.futures.Future) -> None:
        """The runtime's ``told`` when a waiting call's answers have arrived (run by the call's future): the call
        settled with ``value()`` (``Answered.made``), its value made from them where its last answer arrived
        (the engine's loop: making it costs less than handing it to another thread, which in a 5,400-cell
        recalculation kept the service's threads waiting for a CPU a third longer), or, where that is a
        serial thread (the disk's, a reader's, whose next read would wait), by a worker; without one (a
        request was cancelled), run again (still pending, it is watched again)."""
        answered = settled.result()
        caller, value = answered.caller, answered.made
        if value is None:
            try:
                self._pool.submit(self._run, caller)
            except RuntimeError:  # the service is closing
                pass
            return
        if not on_serial_thread():  # where its last answer arrived (the engine's loop): made here
            self._finish(caller, value)
            return
        with self._lock:  # settled with the others the worker has not taken yet: one task for them all
            self._answered.append((caller, value))
            if self._finishing:
                return
            self._finishing = True
        try:
            self._pool.submit(self._finish_answered)
        except RuntimeError:  # the service is closing
            pass

    async def settle(self, ids: list[str], wait: float) -> dict[str, Any]:
        """The calls of ``ids`` that have settled (waiting up to ``wait`` s for the first, then ``gather_for(ids)``
        for those that settle with it), and those still pending; an id this service does not know is
        ``unknown`` (ask the call again). The ids are looked up once; after that the poll hears of each
        call that settles (``_settle``), so a wake costs what settled since, not a look at every id again;
        and it is woken for its first call, then while it gathers only by its last (thousands of calls
        settling over a poll do not wake it, nor the service's loop, thousands of times)."""
        answer: dict[str, Any] = {}
        async for part in self._heard(ids, wait, once=True):
            answer = part
        return answer

    async def settle_stream(self, ids: list[str], wait: float) -> AsyncIterator[dict[str, Any]]:
        """``settle`` as a stream: the calls of ``ids`` as they settle (each part those heard of within
        ``GATHER`` of one another), until every one has or ``wait`` s have passed; the ids are sent once,
        not again on every poll. The last part has ``end`` and, as ``settle``'s answer, ``pending``,
        ``unknown`` and ``stopping``; an earlier one may carry ``unknown`` too."""
        async for part in self._heard(ids, wait, once=False):
            yield part

    async def _heard(self, ids: list[str], wait: float, once: bool) -> AsyncIterator[dict[str, Any]]:
        """``settle`` (``once``: one answer, after ``gather_for(ids)``) and ``settle_stream`` (a part each
        ``GATHER``): the one wait both are."""
        deadline = time.monotonic() + max(0.0, min(wait, MAX_WAIT))
        gathering: float | None = None
        done: set[str] = set()
        fresh: dict[str, Any] = {}  # settled, not yet in a part
        unknown: list[str] = []
        poll = _Poll(ids)
        with self._lock:
            for cid in poll.ids:
                entry = self._entries.get(cid)
                if entry is None:
                    unknown.append(cid)
                elif entry.settled:
                    fresh[cid] = entry.value
            poll.left -= len(fresh) + len(unknown)
            self._polls.add(poll)
        done.update(fresh)
        gone = set(unknown)
        try:
            while True:
                with self._lock:
                    heard, poll.heard = poll.heard, []
                    poll.gathering = gathering is not None  # a stream's next part: woken by its first again
                for cid, v in heard:
                    if cid not in gone:
                        fresh[cid] = v
                        done.add(cid)
                waiting = len(poll.ids) - len(done) - len(gone)
                now = time.monotonic()
                if (fresh or unknown) and gathering is None and waiting:
                    gathering = min(deadline, now + (gather_for(len(poll.ids)) if once else GATHER))
                end = gathering if gathering is not None else deadline
                if not waiting or now >= deadline or self.stopping:
                    break
                if now >= end:  # a part: what settled with the first since the last
                    if not once:
                        yield {"results": {cid: self._result(v) for cid, v in fresh.items()}, "unknown": unknown}
                        fresh, unknown, gathering = {}, [], None
                        continue
                    break
                if gathering is not None and not poll.gathering:  # from now on only its last wakes it
                    with self._lock:
                        poll.gathering = True
                poll.woken.clear()  # nothing heard since the look above: the loop ran nothing between
                try:
                    await asyncio.wait_for(poll.woken.wait(), end - now)
                except TimeoutError:
                    pass
        finally:
            with self._lock:
                self._polls.discard(poll)
        yield {"results": {cid: self._result(v) for cid, v in fresh.items()},
               "pending": [cid for cid in poll.ids if cid not in done and cid not in gone],
               "unknown": unknown, "stopping": self.stopping, **({} if once else {"end": True})}

    # -- HTTP -----------------------------------------------------------------------------------
    def app(self):
        app = web.Application(client_max_size=self.max_request_bytes, middlewares=[self._guard])
        app.router.add_get("/", self._home)
        app.router.add_get("/healthz", self._health)
        app.router.add_post("/api/calls", self._calls)
        app.router.add_post("/api/settle", self._settle_http)
        app.router.add_get("/api/status", self._status)
        app.router.add_route("OPTIONS", "/api/{tail:.*}", self._preflight)
        app.router.add_get("/addin/functions.json", self._metadata)
        app.router.add_get("/addin/wps/functions.json", self._metadata)
        app.router.add_get("/addin/manifest.xml", self._office_manifest)
        app.router.add_get("/addin/wps/manifest.xml", self._wps_manifest)
        app.router.add_get("/addin/wps/", self._wps_page)  # WPS opens an online add-in at its folder's URL
        app.router.add_get("/addin/wps", self._wps_folder)
        app.router.add_static("/addin/", STATIC, append_version=False)
        app.on_startup.append(self._started)
        app.on_shutdown.append(self._stopping)
        return app

    async def _started(self, app) -> None:
        self._loop = asyncio.get_running_loop()

    async def _stopping(self, app) -> None:
        """Polls still held answer at once (``stopping``): the add-in shows its calls' errors, never hangs."""
        self.stopping = True
        with self._lock:
            held = list(self._polls)
        for poll in held:
            poll.woken.set()

    def client(self, request) -> str:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        return peer[0] if peer else "?"

    def _cors(self, request, response) -> None:
        origin = request.headers.get("Origin")
        if origin and origin in self.origins():
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"

    @web.middleware
    async def _guard(self, request, handler):
        api = request.path.startswith("/api/")
        origin = request.headers.get("Origin")
        if api and origin is not None and origin not in self.origins():
            return _json_error(403, f"origin {origin} is not the add-in's ({', '.join(sorted(self.origins()))}); "
                                    "start the service with --origin for another")
        if api and request.method != "OPTIONS":
            if self.key:
                given = request.headers.get("X-Xladdin-Key") or request.headers.get("Authorization", "")
                given = given.removeprefix("Bearer ").strip()
                if not hmac.compare_digest(given.encode(), self.key.encode()):
                    return _json_error(401, "a key is required: send it as X-Xladdin-Key (the Office manifest and "
                                            "WPS's jsplugins.xml entry carry it when written with "
                                            "XLADDIN_CELLS_KEY set)")
            # the key's bucket when there is one (a process without it cannot hold the add-in at 429)
            wait = self.bucket.take("key" if self.key else self.client(request))
            if wait:
                self.counts["limited"] += 1
                return _json_error(429, f"too many requests: at most {self.bucket.rate:g} a second",
                                   **{"Retry-After": f"{max(1, round(wait))}"})
        try:
            response = await handler(request)
        except web.HTTPRequestEntityTooLarge:
            response = _json_error(413, f"request too large: at most {self.max_request_bytes >> 20} MiB")
        except web.HTTPException as e:
            if e.status < 400:
                raise
            response = _json_error(e.status, e.reason)
        except Exception as e:  # a request's failure is its answer, never the service's end
            log.exception("cell service request failed")
            response = _json_error(500, f"internal error: {e}")
        if not response.prepared:  # (a stream sets its own before its first part)
            self._cors(request, response)
        return response

    async def _home(self, request):
        raise web.HTTPFound("/addin/taskpane.html")

    async def _wps_page(self, request):
        return web.FileResponse(STATIC / "wps" / "index.html")

    async def _wps_folder(self, request):
        raise web.HTTPFound("/addin/wps/")  # the folder, so the page's relative main.js is the folder's

    async def _health(self, request):
        return web.json_response({"ok": True, "stopping": self.stopping})

    async def _preflight(self, request):
        response = web.Response(status=204)
        response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = "Content-Type, X-Xladdin-Key, Authorization"
        response.headers["Access-Control-Max-Age"] = "600"
        return response

    async def _body(self, request) -> dict[str, Any]:
        if request.content_length is not None and request.content_length > self.max_request_bytes:
            raise _TooLarge()
        raw = await request.read()
        try:
            body = json.loads(raw, parse_constant=_no_constant)
        except RecursionError:
            raise calls.CallError(f"the request is nested too deep: at most {MAX_DEPTH} levels") from None
        except ValueError as e:
            raise calls.CallError(f"the request is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise calls.CallError("the request is a JSON object")
        if _deeper(body, MAX_DEPTH):
            raise calls.CallError(f"the request is nested too deep: at most {MAX_DEPTH} levels")
        return body

    async def _json_body(self, request) -> tuple[dict[str, Any] | None, Any]:
        """The request's JSON object, or ``None`` and the error response that says why (413, 400)."""
        try:
            return await self._body(request), None
        except _TooLarge:
            return None, _json_error(413, f"request too large: at most {self.max_request_bytes >> 20} MiB")
        except calls.CallError as e:
            return None, _json_error(400, str(e))

    async def _calls(self, request):
        self.counts["requests"] += 1
        body, refused = await self._json_body(request)
        if body is None:
            return refused
        batch = body.get("calls")
        if not isinstance(batch, list):
            return _json_error(400, "the request is {\"calls\": [{\"fn\": NAME, \"args\": [...]}, ...]}")
        if len(batch) > self.max_calls:
            return _json_error(413, f"{len(batch)} calls in one request: at most {self.max_calls}")
        results = await asyncio.get_running_loop().run_in_executor(self._pool, self.answer, batch)
        return web.json_response({"results": results}, dumps=_dumps)

    async def _settle_http(self, request):
        self.counts["polls"] += 1
        body, refused = await self._json_body(request)
        if body is None:
            return refused
        ids = body.get("ids")
        wait = body.get("wait", 20)
        if not isinstance(ids, list) or not set(map(type, ids)) <= {str}:
            return _json_error(400, "the request is {\"ids\": [ID, ...], \"wait\": SECONDS}")
        if not isinstance(wait, int | float) or isinstance(wait, bool):
            return _json_error(400, "wait: seconds, a number")
        if body.get("stream") is not True:
            return web.json_response(await self.settle(ids, float(wait)), dumps=_dumps)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson; charset=utf-8",
                                               "Cache-Control": "no-store"})
        self._cors(request, response)
        await response.prepare(request)
        try:
            async for part in self.settle_stream(ids, float(wait)):
                # a reader that takes nothing stalls the write: past STALL_S its stream is dropped, with what it
                # held, instead of keeping every part it never reads
                await asyncio.wait_for(response.write(_dumps(part).encode() + b"\n"), STALL_S)
                await asyncio.wait_for(_drained(request.transport), STALL_S)  # a part the socket took whole
            await asyncio.wait_for(response.write_eof(), STALL_S)
        except ConnectionError:  # the client went away: its calls are asked again if it comes back
            pass
        except TimeoutError:
            self.counts["streams_dropped"] += 1
            if request.transport is not None:
                request.transport.abort()
        return response

    async def _status(self, request):
        from ..sheet import functions

        table = await asyncio.get_running_loop().run_in_executor(self._pool, functions.status, self.runtime)
        return web.json_response({"status": calls._plain(table), "service": dict(self.counts),
                                  "calls": len(self._entries)}, dumps=_dumps)

    async def _metadata(self, request):
        return web.json_response(metadata(), dumps=_dumps)

    def base_url(self, request=None) -> str:
        if request is not None and request.host:
            return f"https://{request.host}"
        host = "localhost" if loopback(self.host) or self.host in ("0.0.0.0", "::") else self.host
        return f"https://{host}:{self.port}"

    async def _office_manifest(self, request):
        return web.Response(text=manifests.office(self.base_url(request)), content_type="application/xml")

    async def _wps_manifest(self, request):
        return web.Response(text=manifests.wps_manifest(), content_type="application/xml")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._later.shutdown(wait=False, cancel_futures=True)


class _TooLarge(Exception):
    pass


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON number")


def _deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def open_bounds(connections: int) -> tuple[int, int]:
    """The open connections and the listen backlog (asyncio accepts as many at once, before a connection over
    the bound is closed), kept below the process's open-file limit now: ``connections`` at most, beside the
    files the process holds already and ``FILES_KEPT`` more for the files it opens later (its cache, model,
    engine and logs)."""
    try:
        import resource
    except ImportError:  # Windows: no such limit per process
        return connections, BACKLOG
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return connections, BACKLOG
    free = soft - _files_open() - FILES_KEPT
    backlog = min(BACKLOG, max(16, free // 4))
    return max(MIN_CONNECTIONS, min(connections, free - backlog)), backlog


def _files_open() -> int:
    """The descriptors this process holds now (0 where the system does not list them)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder))
        except OSError:
            continue
    return 0


class _Site(web.BaseSite):
    """A TCP site whose connections are bounded from the moment each is accepted, its TLS handshake
    included (asyncio tells aiohttp of a connection only once its handshake is over): at most ``limit``
    open in all, below the open-file limit (``open_bounds``), and ``MAX_PER_CLIENT`` from one address
    beyond this machine (this machine's clients, Excel, WPS and browsers alike, all come from loopback and
    share the total). A connection over a bound makes room by closing an open one that is not in a request,
    the oldest still in its handshake first, else the oldest idle, taken from its own address when that is
    at its bound, else from the address holding the most (never from one holding fewer than its own); with
    none to close it is closed itself. A handshake has ``HANDSHAKE_TIMEOUT``; aiohttp's keep-alive timer
    closes a connection whose next request's headers have not arrived in time."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, context: ssl.SSLContext | None, limit: int):
        limit, backlog = open_bounds(limit)
        super().__init__(runner, ssl_context=context, backlog=backlog)
        self._host, self._port, self._limit = host, port, limit
        self._open: dict[_Accepted, None] = {}  # every connection not yet lost, in the order accepted
        self.refused = 0  # connections closed at once, over a bound with none to make room
        self.closed = 0  # open ones closed to make room for a newer

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    @property
    def limit(self) -> int:
        return self._limit

    def per_client(self, peer: str) -> int:
        try:
            local = ipaddress.ip_address(peer).is_loopback
        except ValueError:  # not an address: no share to tell
            local = True
        return self._limit if local else min(MAX_PER_CLIENT, self._limit)

    def holding(self) -> list[_Accepted]:
        """The connections open now (a closed one is counted until its descriptor is let go)."""
        return [c for c in self._open if c.raw is not None and not c.raw.is_closing()]

    def _handler(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None
        if self._ssl_context is None:
            return _Plain(self, server())
        return _Tls(self, server(), self._ssl_context)

    def _admit(self, new: _Accepted) -> bool:
        """Whether the accepted connection ``new`` stays (room made for it where a bound is reached)."""
        open_ = self.holding()
        mine = [c for c in open_ if c.peer == new.peer]
        if len(mine) >= self.per_client(new.peer):
            made = self._make_room(mine)
        elif len(open_) >= self._limit:
            counts = collections.Counter(c.peer for c in open_)
            made = any(self._make_room([c for c in open_ if c.peer == peer])
                       for peer, n in counts.most_common() if n >= len(mine))
        else:
            made = True
        if not made:
            self.refused += 1
            return False
        self._open[new] = None
        return True

    def _make_room(self, among: list[_Accepted]) -> bool:
        """The oldest of ``among`` still in its handshake, else the oldest idle, closed at once (its
        descriptor let go now, not after a TLS goodbye it may never answer); False where all are in a request."""
        shaking = [c for c in among if c.handler.transport is None]
        idle = [c for c in among if not getattr(c.handler, "_request_in_progress", False)]
        for c in shaking[:1] or idle[:1]:
            c.raw.abort()
            self.closed += 1
            return True
        return False

    def _lost(self, conn: _Accepted) -> None:
        self._open.pop(conn, None)

    async def start(self) -> None:
        await super().start()
        self._server = await asyncio.get_running_loop().create_server(
            self._handler, self._host, self._port, backlog=self._backlog, reuse_address=True)

    async def stop(self) -> None:
        """No new connection; those still in their handshake closed (aiohttp closes the others, a held
        poll's once it has answered)."""
        await super().stop()
        for c in list(self._open):
            if c.handler.transport is None and c.raw is not None:
                c.raw.abort()


class _Accepted:
    """An accepted connection, told of its socket (``raw``) before anything else is: its peer's address and
    aiohttp's handler for it (whose ``transport`` is set once its TLS handshake is over)."""

    site: _Site
    handler: Any
    raw: asyncio.Transport | None = None
    peer = "?"
    refused = False

    def _accepted(self, transport: asyncio.BaseTransport) -> bool:
        self.raw = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if peer else "?"
        if not self.site._admit(self):
            self.refused = True
            transport.abort()
        return not self.refused


class _Tls(_Accepted, sslproto.SSLProtocol):
    """asyncio's own TLS protocol for a server socket (what ``create_server(ssl=…)`` makes), which the site
    sees from the accept: a connection in its handshake is counted and can be closed."""

    def __init__(self, site: _Site, handler: Any, context: ssl.SSLContext):
        super().__init__(asyncio.get_running_loop(), handler, context, None, server_side=True,
                         ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
        self.site, self.handler = site, handler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._accepted(transport):
            super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.site._lost(self)
        if not self.refused:
            super().connection_lost(exc)


class _Plain(_Accepted, asyncio.Protocol):
    """A connection without TLS, told to aiohttp's handler once admitted."""

    def __init__(self, site: _Site, handler: Any):
        self.site, self.handler = site, handler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._accepted(transport):
            self.handler.connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.site._lost(self)
        if not self.refused:
            self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()


async def _drained(transport: asyncio.BaseTransport | None) -> None:
    """Until ``transport`` holds at most ``DRAINED_BYTES`` not yet sent: a part larger than the socket's
    buffers is taken by the transport whole (TLS gives no back-pressure on one write), so a reader that
    takes nothing is seen here, not at the next write."""
    while transport is not None and not transport.is_closing() and _unsent(transport) > DRAINED_BYTES:
        await asyncio.sleep(DRAIN_POLL_S)


def _unsent(transport: Any) -> int:
    """The bytes ``transport`` holds unsent: its own, and under TLS the socket's transport's below it (asyncio's
    TLS layer hands a write down whole; its own count leaves that out)."""
    lower = getattr(getattr(transport, "_ssl_protocol", None), "_transport", None)
    return transport.get_write_buffer_size() + (lower.get_write_buffer_size() if lower is not None else 0)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def more_open_files(wanted: int = 4096) -> None:
    """The process's open-file limit raised toward ``wanted`` (macOS starts a process at 256), within the
    hard limit the system sets; where it cannot be raised the connection bound still holds."""
    try:
        import resource
    except ImportError:  # Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            log.warning("the open-file limit stays %s: %s", soft, e)


def tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


class Running:
    """The service serving on its own thread (tests, benchmarks, ``serve``): ``url``, ``stop()``."""

    def __init__(self, service: CellService, context: ssl.SSLContext | None,
                 on_ready: Callable[[str], None] | None = None):
        self.service = service
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._runner: web.AppRunner | None = None
        self._loop = asyncio.new_event_loop()
        self._context = context
        self.thread = threading.Thread(target=self._run, name="xladdin-cells-http", daemon=True)
        self.thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise ConfigError(f"the cell service cannot start on {service.host}:{service.port}: {self._error}")
        scheme = "https" if context is not None else "http"
        host = "127.0.0.1" if service.host in ("0.0.0.0", "::") else service.host
        self.url = f"{scheme}://{host}:{service.port}"
        if on_ready:
            on_ready(self.url)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._runner = web.AppRunner(self.service.app(), handle_signals=False, shutdown_timeout=2,
                                         keepalive_timeout=self.service.idle_timeout)
            await self._runner.setup()
            self.site = _Site(self._runner, self.service.host, self.service.port, self._context,
                              self.service.max_connections)
            await self.site.start()
            if self.service.port == 0:
                self.service.port = self._runner.addresses[0][1]

        try:
            self._loop.run_until_complete(start())
        except BaseException as e:  # noqa: BLE001  (told to the starting thread)
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        """Stop serving (held polls answer ``stopping``); the runtime is the caller's to close."""
        if self._runner is None or self._loop.is_closed():
            return

        async def cleanup() -> None:
            assert self._runner is not None
            await self._runner.cleanup()

        try:
            asyncio.run_coroutine_threadsafe(cleanup(), self._loop).result(15)
        except Exception as e:
            log.warning("the cell service stopped uncleanly: %s", e)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self.thread.join(10)
        self.service.close()
