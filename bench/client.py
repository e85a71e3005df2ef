"""``python -m bench client``: the client's own CPU per row as a table grows, side by side in one run.

On a GPU the answers come back faster than a CPU model can give them, and the client's own work
per row (resolve, cache lookup, schema, validate, audit, waiting for the tickets) is what is left.
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
import tempfile
import time
from pathlib import Path
from typing import Any

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Resolver
from xladdin.engine import openai_http
from xladdin.engine.base import request_fields
from xladdin.settings import Settings
from xladdin.tasks import ScreenTask
from xladdin.testing import ScriptedEngine, screen_answer

from .common import RESULTS, machine, rows

TASK = ScreenTask()


class TypedSDKEngine(openai_http.OpenAIHTTPEngine):
    """The HTTP engine asking through the SDK's typed ``chat.completions.create`` (as before the plain body)."""

    async def _ask(self, client, messages, schema, params):  # noqa: ANN001, ANN202
        r = await self._bounded(client.chat.completions.create(
            model=self.served, temperature=params.temperature, seed=params.seed, max_tokens=params.max_tokens,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
            **request_fields(messages, schema, self.options.structured_output)))
        choice = r.choices[0]
        return {"choices": [{"message": {"content": choice.message.content}, "finish_reason": choice.finish_reason}],
                "usage": {"completion_tokens": r.usage.completion_tokens if r.usage else 0}}


class AiohttpPools(openai_http._Pools):
    """Every request through one pool of the SDK's aiohttp client (``openai[aiohttp]``), sized to what is
    in flight: no shards, no shared TLS context."""

    def _shard(self, url: str) -> openai_http._Shard:
        size = openai_http.POOL_CONNECTIONS
        http = self._openai.DefaultAioHttpClient(limits=self._limits(max_connections=size,
                                                                     max_keepalive_connections=size))
        return openai_http._Shard(self._openai.AsyncOpenAI(base_url=url, api_key=self.options.api_key or "EMPTY",
                                                           timeout=self.options.timeout,
                                                           max_retries=self.options.retries, http_client=http))


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


def http_table(n: int, seed: int, in_flight: int, pool_connections: int, typed: bool,
               aiohttp: bool = False) -> dict[str, Any]:
    """``n`` rows through the HTTP engine, its connections in pools of ``pool_connections``, asking
    through the SDK's typed call when ``typed``, over the SDK's aiohttp client when ``aiohttp``."""
    from .answer_server import serve

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    port = sock.getsockname()[1]
    server = multiprocessing.get_context("fork").Process(target=serve, args=(sock, 0.5, 8.0, seed), daemon=True)
    server.start()  # before the batcher's threads exist
    sock.close()
    shipped, openai_http.POOL_CONNECTIONS = openai_http.POOL_CONNECTIONS, pool_connections
    try:
        settings = Settings.load({"engine_url": f"http://127.0.0.1:{port}/v1", "no_cache": True,
                                  "cache_dir": tempfile.mkdtemp(), "max_parallel": in_flight})
        data = rows(n, seed=seed)
        engine = (TypedSDKEngine if typed else openai_http.OpenAIHTTPEngine)(settings)
        if aiohttp:
            engine._pools = AiohttpPools(engine._openai, engine.urls, engine.options)
        with Batcher.from_settings(settings, engine) as b:
            b.own_engine = True  # closed on the batcher's loop, as a built engine is
            b.start()
            wall, cpu = time.perf_counter(), time.process_time()
            results = Resolver(b).map(TASK, data)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            pools = engine.pools
    finally:
        openai_http.POOL_CONNECTIONS = shipped
        server.kill()
        server.join()
    errors = [r for r in results if isinstance(r, Exception)]
    request = "typed SDK call" if typed else "plain body"
    return {"rows": n, "pool_connections": pool_connections, "request": request + (" over aiohttp" if aiohttp else ""),
            "pools": pools[0], "seconds": round(wall, 2),
            "cpu_seconds": round(cpu, 2), "cpu_ms_per_row": round(cpu * 1e3 / n, 3), "errors": len(errors),
            "first_error": str(errors[0]) if errors else None}


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
    pools = openai_http.POOL_CONNECTIONS
    # shipped, typed, as before (one pool, typed), and the SDK's aiohttp client (one pool)
    for pool, typed, aio in ((pools, False, False), (pools, True, False), (args.in_flight + 8, True, False),
                             (args.in_flight + 8, False, True)):
        http.append(http_table(args.http_rows, seed=400, in_flight=args.in_flight, pool_connections=pool, typed=typed,
                               aiohttp=aio))
        print(json.dumps(http[-1]), flush=True)
    data = {"task_version": TASK.version, "in_flight": args.in_flight, "machine": machine(), "runs": runs,
            "growth": round(runs[-1]["cpu_ms_per_row"] / runs[0]["cpu_ms_per_row"], 2), "http": http,
            "before_over_shipped": round(http[2]["cpu_ms_per_row"] / http[0]["cpu_ms_per_row"], 2),
            "aiohttp_over_shipped": round(http[3]["cpu_ms_per_row"] / http[0]["cpu_ms_per_row"], 2)}
    Path(args.out).write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    print(f"CPU per row, largest ÷ smallest table: {data['growth']}; HTTP, before ÷ shipped: "
          f"{data['before_over_shipped']}")
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
              "with the table; waiting on every pending ticket per answer made it 2.1).", ""]
    if "http" in d:
        lines += ["Through HTTP (`openai_http` engine, a stand-in server in another process: sockets and delays, "
                  f"no model), {d['http'][0]['rows']} rows, {d['in_flight']} in flight:", "",
                  "| connections | request | pools at the peak | seconds | client CPU seconds | CPU ms per row "
                  "| errors |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| pools of {r['pool_connections']} | {r['request']} | {r['pools']} | {r['seconds']} | "
                  f"{r['cpu_seconds']} | {r['cpu_ms_per_row']} | {r['errors']} |" for r in d["http"]]
        lines += ["", f"- Before (one pool, typed call) ÷ shipped: **{d['before_over_shipped']}×** the client's CPU "
                  "per row. The HTTP library's pool walks every connection it holds, and probes each idle one's "
                  "socket, whenever a request starts or ends; the SDK's typed call transforms every request "
                  "(messages and schema) and builds response models.", ""]
        if "aiohttp_over_shipped" in d:
            lines += [f"- The SDK's aiohttp client (`openai[aiohttp]`, one pool as large as what is in flight) ÷ "
                      f"shipped: **{d['aiohttp_over_shipped']}×** the client's CPU per row. Not switched to: its "
                      "transport reports no connection of a response (httpx2's `network_stream`), by which the engine "
                      "identifies again the model behind every new connection — a model replaced at the same URL "
                      "under the same served name would go unseen.", ""]
    return lines
