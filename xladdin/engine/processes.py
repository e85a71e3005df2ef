"""A server as a child process (``ServerProcess``): started in a process session of its own, its output
captured, waited for until it answers (its last lines and a diagnosis when it dies first), stopped in
order (SIGINT, then SIGTERM, then SIGKILL). The GPU box's launcher (``xladdin.server``) and Calc's private
CPU server (``private_server``) both run their servers through it."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from ..errors import EngineError

DIAGNOSES = (
    (("CUDA out of memory", "OutOfMemoryError", "out of memory", "No available memory for the cache blocks"),
     "out of GPU memory: pick a smaller profile or lower --gpu-memory-utilization/--max-model-len"),
    (("Address already in use", "port in use", "cannot bind"), "port in use: choose another --port"),
    (("not supported for now", "Unrecognized model", "architectures", "Model architectures"),
     "unknown model architecture for this vLLM: upgrade vLLM or choose another model"),
    (("No CUDA GPUs are available", "Failed to infer device type", "libcuda"), "no usable GPU found"),
    (("model file not found", "cannot download", "not a valid model", "Repository Not Found"),
     "model not found"),
)

INTERRUPT_S = 10.0  # after Ctrl-C's signal, how long a server gets to stop in order


def diagnose(lines: Sequence[str]) -> str:
    text = "\n".join(lines)
    for needles, cause in DIAGNOSES:
        if any(n in text for n in needles):
            return cause
    return "the server exited"


class ServerProcess:
    """A child server process with its output captured; a context manager."""

    def __init__(self, cmd: list[str], base_url: str, *, api_key: str | None = None, echo: bool = False,
                 env: dict[str, str] | None = None):
        self.cmd = cmd
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.echo = echo
        self.lines: collections.deque[str] = collections.deque(maxlen=200)
        kwargs: dict = {"start_new_session": True} if os.name == "posix" else {
            "creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}  # type: ignore[attr-defined]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     encoding="utf-8", errors="replace", env=env, **kwargs)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            if self.echo:
                print(line, file=sys.stderr, flush=True)

    def _get(self, path: str, timeout: float = 5.0) -> int:
        return self._fetch(path, timeout)[0]

    def _fetch(self, path: str, timeout: float) -> tuple[int, bytes]:
        req = urllib.request.Request(self.base_url + path)
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, b""
        except (urllib.error.URLError, OSError):
            return 0, b""

    def busy(self) -> bool:
        """A llama.cpp server (the CPU server) computing an answer, or not answering at all: its
        Python does not get to run a Ctrl-C handler until the answers in progress are done. (vLLM
        has no ``/slots``: never busy here, it stops in order.)"""
        status, body = self._fetch("/slots", 2.0)
        if status == 0:
            return True
        try:
            slots = json.loads(body) if status == 200 else []
        except ValueError:
            return False
        return isinstance(slots, list) and any(isinstance(s, dict) and s.get("is_processing") for s in slots)

    def wait_ready(self, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._reader.join(2)
                last = "\n  ".join(list(self.lines)[-8:]) or "(no output)"
                raise EngineError(f"{diagnose(self.lines)} (exit code {self.proc.returncode}); last output:\n  {last}")
            if self._get("/health") == 200 and self._get("/v1/models") == 200:
                return
            time.sleep(0.5)
        self.stop()
        raise EngineError(f"server not ready after {timeout:g}s; last output: {list(self.lines)[-3:]}")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGINT to the process group (the servers stop in order), SIGTERM after ``INTERRUPT_S`` (the
        CPU server ends at once; vLLM shuts down), then SIGKILL after ``timeout``; returns the exit code.
        A CPU server busy answering gets SIGTERM at once: it would not stop in order before its answers
        were done."""
        if self.proc.poll() is None:
            try:
                if os.name == "posix" and self.busy():
                    os.killpg(self.proc.pid, signal.SIGTERM)
                elif os.name == "posix":
                    os.killpg(self.proc.pid, signal.SIGINT)
                    try:
                        self.proc.wait(min(INTERRUPT_S, timeout))
                    except subprocess.TimeoutExpired:
                        os.killpg(self.proc.pid, signal.SIGTERM)
                else:
                    self.proc.send_signal(signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                if os.name == "posix":
                    os.killpg(self.proc.pid, signal.SIGKILL)
                else:
                    self.proc.kill()
                self.proc.wait(10)
            except ProcessLookupError:
                pass
        self._reader.join(2)
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# A process of ours ended with its parent (a private server, a report reader).

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_parent(pid: int) -> None:
    """For a process of ours (a private server, a report reader): on Linux, when ``pid`` is its parent,
    the kernel kills it when the parent dies (``PR_SET_PDEATHSIG``), however busy it is — no Python code
    has to run for it. The kernel sends it when the parent's *thread* that started this process ends, so
    that thread must live as long as the parent needs the process. Elsewhere the caller watches."""
    import os
    import signal
    import sys

    if not sys.platform.startswith("linux") or os.getppid() != pid:
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # the caller's watcher is left
    if os.getppid() != pid:  # the parent died before the signal was asked for
        os._exit(0)


def watch_parent(pid: int, interval: float = 1.0) -> None:
    """End this process (``os._exit``) once its parent ``pid`` is gone: a daemon thread's loop, for the
    systems without ``PR_SET_PDEATHSIG`` (a hung read in C code releases the interpreter to it)."""
    import os

    while os.getppid() == pid:
        time.sleep(interval)
    os._exit(0)
