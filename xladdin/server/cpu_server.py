"""The embedded CPU engine on an OpenAI-compatible HTTP port (llama.cpp's server),
for a LAN without a GPU: ``python -m xladdin.server.cpu_server --model PATH.gguf``."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading

from xladdin.engine.embedded import EmbeddedEngine
from xladdin.engine.processes import end_with_parent
from xladdin.errors import XladdinError
from xladdin.settings import Settings

STOP_WAIT_S = 5.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xladdin.server.cpu_server")
    p.add_argument("--model", help="GGUF path or hub id (default: the starter model)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--api-key", help="require this key (better: XLADDIN_API_KEY in the environment, not in argv)")
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--n-ctx", type=int, default=4096, help="context tokens per slot")
    p.add_argument("--exit-with", type=int, metavar="PID", help="stop when process PID ends (a private server "
                   "of the program that started it)")
    args = p.parse_args(argv)
    stop = threading.Event()
    if args.exit_with:
        end_with_parent(args.exit_with)
        threading.Thread(target=_watch_parent, args=(args.exit_with, stop), daemon=True).start()
    # Ctrl-C (SIGINT) stops the server in order. SIGTERM and SIGHUP (a closing terminal) end the process
    # at once, by the kernel's default action: under load llama.cpp's threads hold the interpreter, so a
    # Python handler would not run until the answers in progress were done.
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        with socket.socket() as probe:  # llama.cpp only says "failed to init": name the cause first
            if os.name == "posix":  # as the server does: a port in TIME_WAIT is free, a listening one is not
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((args.host, args.port))
    except OSError as e:
        print(f"cpu server: error: cannot bind {args.host}:{args.port}: {e.strerror} (port in use?)", file=sys.stderr,
              flush=True)
        return 2
    try:
        settings = Settings.load({"model": args.model, "max_parallel": args.parallel, "n_ctx": args.n_ctx})
        engine = EmbeddedEngine(settings.embedded)
        engine.load(host=args.host, port=args.port, api_key=args.api_key or os.environ.get("XLADDIN_API_KEY"))
    except XladdinError as e:
        print(f"cpu server: error: {e}", file=sys.stderr, flush=True)
        return 2
    print(f"cpu server: serving {engine.model_id} at {engine.address}/v1", flush=True)
    stop.wait()
    # after Ctrl-C, requests still being computed would hold the engine until their answers are done:
    # give the release a few seconds, then leave
    closing = threading.Thread(target=engine.close, daemon=True)
    closing.start()
    closing.join(STOP_WAIT_S)
    print("cpu server: stopped", flush=True)
    if closing.is_alive():
        os._exit(0)
    return 0


def _alive(pid: int) -> bool:
    if os.name == "nt":
        import ctypes

        handle = ctypes.windll.kernel32.OpenProcess(0x00100000, False, pid)  # SYNCHRONIZE
        if not handle:
            return False
        gone = ctypes.windll.kernel32.WaitForSingleObject(handle, 0) == 0
        ctypes.windll.kernel32.CloseHandle(handle)
        return not gone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch_parent(pid: int, stop: threading.Event) -> None:
    """Everywhere: the server ends once process ``pid`` has ended (or this process, its child, has been
    handed to another parent)."""
    child = os.getppid() == pid
    while _alive(pid) and (not child or os.getppid() == pid):
        if stop.wait(1.0):
            return
    try:  # its output went to the parent, which has gone: a print may fail, and must not stop the exit
        print(f"cpu server: process {pid} ended; stopping", flush=True)
    except (OSError, ValueError):
        pass
    os._exit(0)  # the answers in progress have no one to go to


if __name__ == "__main__":
    sys.exit(main())
