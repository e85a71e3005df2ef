"""A report reader process: how one is started (``start``: plain processes of this Python, connected back
over loopback, each with a one-time token) and what runs in it (``main``, ``serve``: each file it is sent
read, its text and code's readings of it sent back), behind the processes that wait on it for CPU and
bounded in memory."""

from __future__ import annotations

import hmac
import importlib
import json
import multiprocessing.connection
import os
import pickle
import secrets
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.processes import end_with_parent, watch_parent
from ..reading import figures
from ..reading.documents import InputError

CONNECT_S = 60.0  # a reader process that has not connected back by then did not start
NICE = 10  # a reader process's niceness above its parent's (``_yield_cpu``)
_BELOW_NORMAL = getattr(subprocess, "BELOW_NORMAL_PRIORITY_CLASS", 0)  # its priority class on Windows


@dataclass
class Worker:
    """A reader process and its connection."""

    process: Any
    conn: multiprocessing.connection.Connection
    job: Any = None  # the file it reads now (``readers._Job``)
    since: float = 0.0


def start(n: int, python: str | None, read: Callable[[str, int], tuple[str, str]],
          memory_mib: int | None) -> list[Worker]:
    """``n`` reader processes (``main``), started together and each connected back over
    loopback with a one-time token of its own (a run's readers get going in one process's start-up
    time, not one after another). (Not multiprocessing's spawn: it runs the user's ``__main__`` again
    in the child, so a plain script that calls ``xladdin.screen`` at its top level would start itself
    over.)"""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(CONNECT_S)
        package_root = str(Path(__file__).resolve().parents[2])  # the same xladdin as this process's
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get(
            "PYTHONPATH")) if p)}
        command = [python or sys.executable, "-c", "from xladdin.core.reader_process import main; main()"]
        starting: list[tuple[str, subprocess.Popen]] = []
        ready: list[Worker] = []
        try:
            for _ in range(max(1, n)):
                token = secrets.token_hex(16)
                process = subprocess.Popen(command, stdin=subprocess.PIPE, env=env, close_fds=True,
                                           creationflags=_BELOW_NORMAL)
                starting.append((token, process))
                hello = {"port": server.getsockname()[1], "token": token, "parent": os.getpid(),
                         "read": f"{read.__module__}:{read.__qualname__}",
                         "memory_mib": memory_mib}
                assert process.stdin is not None
                process.stdin.write(json.dumps(hello).encode() + b"\n")
                process.stdin.close()
            while starting:  # each child's connection, known by its token
                sock, _ = server.accept()
                sock.settimeout(CONNECT_S)
                given = sock.recv(32)
                found = next((k for k, (token, _) in enumerate(starting)
                              if hmac.compare_digest(given, token.encode())), None)
                if found is None:
                    sock.close()
                    continue
                sock.settimeout(None)
                _, process = starting.pop(found)
                ready.append(Worker(process, multiprocessing.connection.Connection(sock.detach())))
            return ready
        except BaseException:
            for process in [p for _, p in starting] + [w.process for w in ready]:
                process.kill()
                process.wait(5)
            for w in ready:
                w.conn.close()
            raise


def serve(conn: multiprocessing.connection.Connection, read: Callable[[str, int], tuple[str, str]]) -> None:
    """A reader process: read each file it is sent, answer ``("ok", digest, text, packed, readings)``
    (the text compressed for the disk store; code's readings of it, ``figures.readings``, pickled, or
    ``None`` when they fail) or ``("error", message)``: the process that asks the engine only stores."""
    while True:
        try:
            path, max_bytes = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        try:
            digest, text = read(path, max_bytes)
            try:
                read_here = pickle.dumps(figures.readings(text), pickle.HIGHEST_PROTOCOL)
            except Exception:  # the main process reads them then; the text stands
                read_here = None
            answer: tuple[Any, ...] = ("ok", digest, text, zlib.compress(text.encode("utf-8"), 1), read_here)
        except InputError as e:
            answer = ("error", e.message)
        except MemoryError:
            answer = ("error", f"{os.path.basename(path)}: reading it needs more memory than a reader may use "
                      "(reader_memory_mib, XLADDIN_READER_MEMORY_MIB): a damaged or decompression-bomb file?")
        except Exception as e:  # a reader's failure is the file's error, never the reader's end
            answer = ("error", f"{os.path.basename(path)}: cannot be read ({e.__class__.__name__}: {e})")
        try:
            conn.send(answer)
        except (OSError, KeyboardInterrupt):
            return


def main() -> None:
    """A reader process: told on stdin where to connect, with its token
    and the read function (``module:name``); serves files until its connection closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's: it ends this process
    hello = json.loads(sys.stdin.readline())
    # a parent killed outright (SIGKILL) closes no connection a hung read would see: the kernel, or a
    # watcher thread, ends this reader with it
    end_with_parent(hello["parent"])
    threading.Thread(target=watch_parent, args=(hello["parent"],), daemon=True).start()
    _bound_memory(hello.get("memory_mib"))
    _yield_cpu()
    module, name = hello["read"].split(":")
    read = getattr(importlib.import_module(module), name)
    sock = socket.create_connection(("127.0.0.1", hello["port"]))
    sock.sendall(hello["token"].encode())
    serve(multiprocessing.connection.Connection(sock.detach()), read)


def _yield_cpu() -> None:
    """This reader behind the processes that wait on it for CPU (POSIX niceness ``NICE``; Windows: started
    below normal priority, ``_BELOW_NORMAL``): an engine on the same machine (a vLLM server's steps, its
    structured output's masks) and the user's spreadsheet go first, and the readers take what is left,
    which is all of it on an idle machine."""
    if hasattr(os, "nice"):
        try:
            os.nice(NICE)
        except OSError:
            pass


def _bound_memory(mib: int | None) -> None:
    """This reader's address space bounded (POSIX ``RLIMIT_AS``): a file that would take more (a
    decompression bomb) fails its read at once — a ``MemoryError``, or the reader's end — as that
    file's error, instead of taking the machine's memory. (Windows: no such limit here; the time bound
    stands.)"""
    if not mib:
        return
    try:
        import resource
    except ImportError:
        return
    limit = int(mib) << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
