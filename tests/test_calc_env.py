"""The Calc add-in's environment as a user meets it: LibreOffice's Python and an environment from another
installation (`xladdin calc build|install|doctor`, a LibreOffice started from that shell), an install
into a chosen profile, and the private CPU server that must not outlive a LibreOffice killed with
SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import pytest

BOUND_S = 60.0  # generous: what is waited on is a condition, never a duration
DEATH_BOUND_S = 30.0  # the kernel ends it at once; it outlived its parent by 30-80 s before


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has stopped
    except FileNotFoundError:
        return True


def _until(condition, bound: float = BOUND_S) -> bool:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


PARENT = textwrap.dedent("""
    import asyncio, json, sys, time
    from xladdin.calc.runtime import PrivateServer
    from xladdin.settings import Settings

    server = PrivateServer(Settings.load(), sys.executable)
    asyncio.run(server._running())  # started from a worker thread, which has ended once asyncio.run returns
    print(json.dumps({"port": server.port, "pid": server._server.proc.pid}), flush=True)
    time.sleep(3600)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_the_private_cpu_server_ends_with_its_parent_killed_while_busy(tiny_model_path, tmp_path):
    """The Calc runtime's private server (``cpu_server --exit-with PID``), busy answering, outlives
    neither its parent killed with SIGKILL nor lets the port listen; it does outlive the thread that
    started it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    env |= {"XLADDIN_MODEL": str(tiny_model_path), "XLADDIN_CACHE_DIR": str(tmp_path / "cache"),
            "XLADDIN_N_THREADS": "2"}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env,
                              start_new_session=True)
    try:
        started = json.loads(parent.stdout.readline())
        port, child = started["port"], started["pid"]
        assert _listening(port) and not _gone(child)  # the thread that spawned it has ended: still serving

        answering = threading.Event()

        def ask() -> None:  # keeps the server busy: long answers, from this process, not the parent
            body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "数一数"}],
                               "max_tokens": 4000, "stream": True}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=BOUND_S) as resp:
                    for _ in resp:
                        answering.set()
            except OSError:
                pass  # the server went away

        askers = [threading.Thread(target=ask, daemon=True) for _ in range(8)]
        for t in askers:
            t.start()
        assert answering.wait(BOUND_S), "the server never started answering"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(BOUND_S)
        assert _until(lambda: _gone(child), DEATH_BOUND_S), "the private server outlived its parent"
        assert not _listening(port)
    finally:
        for pid in (parent.pid, locals().get("child")):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
