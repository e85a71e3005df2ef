"""The Calc add-in's environment as a user meets it: LibreOffice's Python and an environment from another
installation (`xladdin calc build|install|doctor`, a LibreOffice started from that shell), an install
into a chosen profile, and the private CPU server that must not outlive a LibreOffice killed with
SIGKILL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.request
from pathlib import Path

import pytest
from kit import run_cli, wait_until

from xladdin.calc import build
from xladdin.sheet import functions

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


VENV_BIN = str(Path(sys.executable).parent)


def _shell(activated: bool) -> dict[str, str]:
    """This process's environment as a shell gives it: with this environment activated (its ``bin``
    first on PATH), or without it on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    rest = [p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.realpath(p) != os.path.realpath(VENV_BIN)]
    env["PATH"] = os.pathsep.join([VENV_BIN, *rest] if activated else rest)
    return env


def _foreign_python_on_path() -> bool:
    """Whether this environment is from another installation than LibreOffice's Python, so that its
    ``python3`` first on PATH keeps LibreOffice's Python from starting (as LibreOffice starts it)."""
    lo = build.calc_python()
    if lo is None or shutil.which("soffice") is None:
        return False
    r = subprocess.run(["python3", "-c", "import uno"], executable=lo, env=_shell(True), capture_output=True)
    return r.returncode != 0


needs_foreign = pytest.mark.skipif(not _foreign_python_on_path(), reason="this environment is made from "
                                   "LibreOffice's Python (or there is no LibreOffice): nothing to diagnose")


def xladdin(*args: str, env: dict[str, str], cwd=None) -> subprocess.CompletedProcess:
    return run_cli(*args, env=env, cwd=cwd, timeout=600)


@needs_foreign
def test_build_and_doctor_name_a_python_of_another_installation_on_path(tmp_path):
    """From a shell with this environment (pyenv's Python, LibreOffice's is Debian's) activated, a
    LibreOffice loads no add-in and unopkg fails: ``calc build`` warns and ``calc doctor`` fails, each
    naming the python3 on PATH and how to make an environment that works; without it on PATH the
    doctor finds the add-in will load, and notes the other installation."""
    r = xladdin("calc", "build", "-o", str(tmp_path / "x.oxt"), env=_shell(True))
    assert r.returncode == 0 and (tmp_path / "x.oxt").is_file(), r.stderr
    named = os.path.join(VENV_BIN, "python3")
    assert "warning" in r.stderr and named in r.stderr and "--system-site-packages" in r.stderr, r.stderr
    doctor = xladdin("calc", "doctor", env=_shell(True))
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "problem:" in doctor.stdout and named in doctor.stdout and "#NULL!" in doctor.stdout
    assert f"{build.calc_python()} -m venv --system-site-packages" in doctor.stdout
    clean = xladdin("calc", "doctor", env=_shell(False))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "problem:" not in clean.stdout and "note:" in clean.stdout and "another Python installation" in clean.stdout


@pytest.mark.slow
@needs_foreign
def test_install_into_a_chosen_profile_from_a_shell_with_the_environment_on_path(tmp_path):
    """``xladdin calc install --profile DIR`` (as root too) adds the extension to that profile only —
    nothing for all users — though the shell's PATH would make unopkg fail; a LibreOffice started on
    that profile computes the add-in's cells."""
    oxt = tmp_path / f"xladdin-{tmp_path.name}.oxt"
    profile = tmp_path / "lo"
    r = xladdin("calc", "install", "--profile", str(profile / "user"), "-o", str(oxt), env=_shell(True))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "python3 on PATH" in r.stderr  # said, though the install itself got round it
    assert list((profile / "user").rglob(oxt.name)), "not in the profile"
    shared = Path(shutil.which("soffice")).resolve().parents[1] / "share" / "uno_packages"
    assert not list(shared.rglob(oxt.name)), "installed for all users"
    rows = functions.STATUS_ROWS
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"rows": [["x"]], "formulas": [[f"A3:B{rows + 2}", "=QWEN_STATUS()"]]}))
    env = _shell(False) | {"XLADDIN_CACHE_DIR": str(tmp_path / "cache")}
    opened = build.headless(["--profile", str(profile), "--fill", str(job), "--bound", "120"], env)
    assert opened["filled"] and opened["values"][0][0][0] == "engine", opened


@pytest.mark.slow
@needs_foreign
def test_the_template_is_made_from_a_shell_with_the_environment_on_path(tmp_path):
    """``xladdin calc template`` runs a LibreOffice of its own: from a shell with this environment
    activated it starts it so that its Python loads (it failed in unopkg with std::bad_alloc)."""
    book = tmp_path / "stock_screen.ods"
    r = xladdin("calc", "template", "-o", str(book), env=_shell(True) | {"XLADDIN_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "21 formulas call the add-in" in r.stdout and book.is_file()


PARENT = textwrap.dedent("""
    import asyncio, json, sys, time
    from xladdin.engine.private_server import PrivateServer
    from xladdin.settings import Settings

    settings = Settings.load()
    server = PrivateServer(settings.embedded, sys.executable, settings.cache_dir)
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
        wait_until(lambda: _gone(child), DEATH_BOUND_S, 0.1, message="the private server outlived its parent")
        # its main thread shows as a zombie while its other threads (llama.cpp's, busy) are still ending: the
        # listening socket, which they share, closes with the last of them
        wait_until(lambda: not _listening(port), DEATH_BOUND_S, 0.1, message="its port still listens")
    finally:
        for pid in (parent.pid, locals().get("child")):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
