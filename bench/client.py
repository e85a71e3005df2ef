"""``python -m bench client``: the client's own CPU per row as a table grows, side by side in one run.

On a GPU the answers come back faster than a CPU model can give them, and the client's own work
per row (resolve, cache lookup, schema, validate, audit, waiting for the futures) is what is left.
Here an engine with no model answers each request after a random 0.5-8 s (answers spread in time,
as a server's are), 1,024 in flight, for a table of 1,000 rows and one of 5,400 (the market pool's
size). Measured: the process's CPU seconds per row. A client whose cost per row grows with the
table (as waiting on every pending ticket per answer did: 0.89 → 1.88 ms per row from 1,000 to
5,400 rows) shows it here as a ratio above 1. Results: ``bench/results/client.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import socket
import sys
import tempfile
import time
from typing import Any

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Resolver
from xladdin.engine import openai_http
from xladdin.settings import Settings
from xladdin.tasks import ScreenTask
from xladdin.testing import ScriptedEngine, screen_answer

from .common import RESULTS, machine, rows, write_run

HEADLINE = ('sdk_over_shipped',)  # the numbers docs/BENCHMARKS.md gives for each earlier run

TASK = ScreenTask()


class SDKHTTP(openai_http._HTTP):
    """The chat requests posted through the OpenAI SDK over its httpx client, in pools of ``POOLED``
    connections (a new pool when every one is busy), as the engine sent them before aiohttp: the
    arm "before" of the HTTP table."""

    POOLED = 32

    def __init__(self, options: Any):
        super().__init__(options)
        import openai

        self._openai, self._pools = openai, []
        # the SDK's HTTP library's response type (httpx2's, or httpx's in older SDKs): what a raw post returns
        self._response = sys.modules[type(openai.DEFAULT_CONNECTION_LIMITS).__module__.partition(".")[0]].Response

    def _pool(self, url: str) -> list:
        free = [p for p in self._pools if p[1] < self.POOLED]
        if free:
            return min(free, key=lambda p: p[1])
        limits = type(self._openai.DEFAULT_CONNECTION_LIMITS)(max_connections=self.POOLED,
                                                              max_keepalive_connections=self.POOLED)
        http = self._openai.DefaultAsyncHttpxClient(limits=limits)
        client = self._openai.AsyncOpenAI(base_url=url.rsplit("/chat/completions", 1)[0], api_key="EMPTY",
                                          timeout=self._openai.Timeout(None, connect=self.options.timeout),
                                          max_retries=self.options.retries, http_client=http)
        self._pools.append([client, 0])
        return self._pools[-1]

    async def post(self, url: str, body: dict[str, Any], server: str, timeout: float | None = None) -> Any:
        if not url.endswith("/chat/completions"):
            return await super().post(url, body, server, timeout)
        pool = self._pool(url)
        pool[1] += 1
        try:
            resp = await pool[0].post("/chat/completions", body=body, cast_to=self._response)
        finally:
            pool[1] -= 1
        asked = aiohttp.RequestInfo(URL(url), "POST", CIMultiDictProxy(CIMultiDict()), URL(url))
        return openai_http._Answer(resp.status_code, resp.content, resp.headers, asked)

    async def aclose(self) -> None:
        for client, _ in self._pools:
            await client.close()
        await super().aclose()


class SpreadEngine(ScriptedEngine):
    """Answers every request after a random delay (seeded): no model, only time."""

    def __init__(self, low: float, high: float, seed: int, max_parallel: int):
        super().__init__(lambda _: screen_answer(), max_parallel=max_parallel)
        self.random = random.Random(seed)
        self.low, self.high = low, high

    async def complete(self, messages, schema, params) -> str:  # noqa: ANN001
        await asyncio.sleep(self.random.uniform(self.low, self.high))
        return screen_answer()


def table(n: int, seed: int, in_flight: int) -> dict[str, Any]:
    data = rows(n, seed=seed)
    with Batcher(SpreadEngine(0.5, 8.0, seed, in_flight), Cache(tempfile.mkdtemp(), enabled=False)) as b:
        wall, cpu = time.perf_counter(), time.process_time()
        results = Resolver(b).map(TASK, data)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    errors = sum(isinstance(r, Exception) for r in results)
    return {"rows": n, "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
            "cpu_ms_per_row": round(cpu * 1e3 / n, 3), "errors": errors}


def http_table(n: int, seed: int, in_flight: int, sdk: bool,
               delays: tuple[float, float] = (0.5, 8.0)) -> dict[str, Any]:
    """``n`` rows through the HTTP engine: as shipped (aiohttp), or with ``sdk`` its chats posted through
    the OpenAI SDK over httpx in pools of 32 (``SDKHTTP``); each answered after ``delays`` (low, high)
    seconds."""
    from .answer_server import serve

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    port = sock.getsockname()[1]
    server = multiprocessing.get_context("fork").Process(target=serve, args=(sock, *delays, seed), daemon=True)
    server.start()  # before the batcher's threads exist
    sock.close()
    try:
        settings = Settings.load({"engine_url": f"http://127.0.0.1:{port}/v1", "no_cache": True,
                                  "cache_dir": tempfile.mkdtemp(), "max_parallel": in_flight})
        data = rows(n, seed=seed)
        engine = openai_http.OpenAIHTTPEngine(settings.openai_http)
        if sdk:
            engine._http = SDKHTTP(engine.options)
        with Batcher.from_settings(settings, engine) as b:
            b.own_engine = True  # closed on the batcher's loop, as a built engine is
            b.start()
            wall, cpu = time.perf_counter(), time.process_time()
            results = Resolver(b).map(TASK, data)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        server.kill()
        server.join()
    errors = [r for r in results if isinstance(r, Exception)]
    return {"rows": n, "client": "the OpenAI SDK over httpx, pools of 32" if sdk else "aiohttp, one pool",
            "seconds": round(wall, 2), "cpu_seconds": round(cpu, 2), "cpu_ms_per_row": round(cpu * 1e3 / n, 3),
            "errors": len(errors), "first_error": str(errors[0]) if errors else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench client", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,5400", help="table sizes, smallest first")
    p.add_argument("--in-flight", type=int, default=1024)
    p.add_argument("--http-rows", type=int, default=5400, help="rows of the HTTP arm")
    p.add_argument("--out", default=str(RESULTS / "client.json"))
    args = p.parse_args(argv)
    runs = []
    for k, n in enumerate(int(x) for x in args.sizes.split(",")):
        runs.append(table(n, seed=300 + k, in_flight=args.in_flight))
        print(json.dumps(runs[-1]), flush=True)
    http = []
    for sdk in (False, True, False, True):  # alternating, aiohttp first
        http.append(http_table(args.http_rows, seed=400, in_flight=args.in_flight, sdk=sdk))
        print(json.dumps(http[-1]), flush=True)

    def best(sdk: bool) -> float:
        return min(r["cpu_ms_per_row"] for r, s in zip(http, (False, True, False, True), strict=True) if s is sdk)

    data = {"task_version": TASK.version, "in_flight": args.in_flight, "machine": machine(), "runs": runs,
            "growth": round(runs[-1]["cpu_ms_per_row"] / runs[0]["cpu_ms_per_row"], 2), "http": http,
            "sdk_over_shipped": round(best(True) / best(False), 2)}
    write_run(args.out, data)
    print(f"CPU per row, largest ÷ smallest table: {data['growth']}; HTTP, the SDK ÷ shipped: "
          f"{data['sdk_over_shipped']}")
    return 0


def render(d: dict[str, Any]) -> list[str]:
    """Section 8 of docs/BENCHMARKS.md."""
    lines = ["## 8. The client's own CPU per row (`python -m bench client`)", "",
             f"No model: each request answered after a random 0.5-8 s, {d['in_flight']} in flight, "
             f"{d['machine']['cpus']} CPUs, task `{d['task_version']}`; one run.", "",
             "| table | seconds | client CPU seconds | CPU ms per row | errors |", "|---|---|---|---|---|"]
    lines += [f"| {r['rows']} rows | {r['seconds']} | {r['cpu_seconds']} | {r['cpu_ms_per_row']} | {r['errors']} |"
              for r in d["runs"]]
    lines += ["", f"- CPU per row, largest ÷ smallest table: **{d['growth']}** (1 = the cost per row does not grow "
              "with the table; waiting on every pending ticket per answer made it 2.1; one run each on a shared "
              "machine, the smaller table's under a second of CPU: above 1 here, not looked into).", ""]
    if d.get("note"):
        lines += [f"This run: {d['note']}.", ""]
    if "http" in d:
        lines += ["Through HTTP (`openai_http` engine, a stand-in server in another process: sockets and delays, "
                  f"no model), {d['http'][0]['rows']} rows, {d['in_flight']} in flight, the two clients alternating "
                  "(aiohttp first):", "",
                  "| client | seconds | client CPU seconds | CPU ms per row | errors |", "|---|---|---|---|---|"]
        lines += [f"| {r['client']} | {r['seconds']} | {r['cpu_seconds']} | {r['cpu_ms_per_row']} | {r['errors']} |"
                  for r in d["http"]]
        if "sdk_over_shipped" in d:
            lines += ["", f"- The OpenAI SDK over httpx (pools of 32, as before) ÷ shipped (aiohttp): "
                      f"**{d['sdk_over_shipped']}×** the client's CPU per row (best run of each). httpx's pool walks "
                      "every connection it holds, and probes each idle one's socket, whenever a request starts or "
                      "ends; the SDK builds each request and its response through its own layers.", ""]
            for note in d.get("doc_notes", []):  # written with the run
                lines += [note, ""]
        else:  # an earlier run's results (pools of the SDK's client compared)
            lines += ["", f"- Before (one pool, typed call) ÷ pools of 32: **{d.get('before_over_shipped')}×** the "
                      "client's CPU per row.", ""]
    return lines
