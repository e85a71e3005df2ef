"""Start model servers (one per GPU, or the CPU server), wait until they are ready, stop them together.

Each runs as a ``ServerProcess`` (``xladdin.engine.processes``): readiness is ``GET /health`` and
``GET /v1/models`` answering 200. While waiting, the process's output is read (last lines kept); if
it exits early the error names the cause found in that output — out of GPU memory, unknown model
architecture, port in use — and quotes the last lines, rather than guessing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xladdin.engine.processes import ServerProcess


@dataclass(frozen=True)
class ServerSpec:
    """One server to start: its argv, its base URL and its environment (``None``: inherit)."""

    cmd: list[str]
    url: str
    env: dict[str, str] | None = None


def one_per_gpu(cmd: list[str], url: str, port: int, gpus: int, env: dict[str, str] | None) -> list[ServerSpec]:
    """``gpus`` copies of a server command, copy i on GPU i (``CUDA_VISIBLE_DEVICES``) and port
    ``port + i``. On 2×H200 one vLLM server per GPU, the client spreading rows over both, took the
    5,400-row pool from 95 s to 77 s (screen-6); vLLM's ``--data-parallel-size 2`` took it from 138 s
    to 204 s. Since screen-7 one GPU is fast enough that the one client process bounds the pool
    (36.7 s on two, 38.0 s on one: bench/results/gpu.json)."""
    specs = []
    for i in range(gpus):
        argv = [str(port + i) if k > 0 and cmd[k - 1] == "--port" else a for k, a in enumerate(cmd)]
        where = url.rsplit(":", 1)[0] + f":{port + i}"
        specs.append(ServerSpec(argv, where, {**(env or os.environ), "CUDA_VISIBLE_DEVICES": str(i)}))
    return specs


def run_servers(specs: Sequence[ServerSpec], *, timeout: float, api_key: str | None = None, echo: bool = False,
                on_ready: Callable[[list[str]], None] = lambda urls: None) -> list[int | None]:
    """Start every server, wait until all are ready (``on_ready`` gets their URLs), then until one
    exits or Ctrl-C; every server is stopped on the way out (none left listening). Returns the
    exit codes."""
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(ServerProcess(s.cmd, s.url, api_key=api_key, echo=echo, env=s.env))
                   for s in specs]
        try:
            for server in servers:
                server.wait_ready(timeout)
            on_ready([s.base_url for s in servers])
            while all(s.proc.poll() is None for s in servers):
                time.sleep(0.5)
        except KeyboardInterrupt:
            print("stopping…", flush=True)
        return [s.stop() for s in servers]


def cpu_server_command(model: str | None, *, host: str, port: int, parallel: int) -> list[str]:
    """The CPU server's argv. Its API key goes through the environment (``key_env``), never argv."""
    cmd = [sys.executable, "-m", "xladdin.server.cpu_server", "--host", host, "--port", str(port),
           "--parallel", str(parallel)]
    if model:
        cmd += ["--model", model]
    return cmd


def key_env(variable: str, api_key: str | None) -> dict[str, str] | None:
    """The child's environment carrying ``api_key`` in ``variable`` (not visible in ``ps``), or
    ``None`` (inherit) without a key."""
    return {**os.environ, variable: api_key} if api_key else None


def masked(secret: str) -> str:
    return "****" if len(secret) < 12 else f"{secret[:3]}…{secret[-2:]} ({len(secret)} characters)"
