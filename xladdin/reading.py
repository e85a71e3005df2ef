"""Report files read once, on every core, never on the caller's thread.

A report's text is known by its stamp — the resolved path, size and modification time: a stat, no
read — in memory, then in the cache's ``documents`` store (stamp → the content's sha256 → the
text), so a rerun, a reopened workbook or another process parses no file it has read before. A file
not read yet is read in a reader process (pypdfium2 is not thread-safe: one process per core,
started when the first file needs one), and its text comes back as a future: the request goes to
the engine as soon as its file is read, while the other files are still being read.

A file that hangs its reader (longer than ``timeout``) or crashes it (a malformed PDF) is that
file's ``InputError`` naming it; its reader is replaced and the other files go on. ``close`` ends
every reader process at once (Ctrl-C, the end of a run).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import multiprocessing
import multiprocessing.connection
import os
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .cache import Cache
from .documents import FIELD, InputError, ReportPath, locate, read_file

log = logging.getLogger(__name__)
READ_TIMEOUT_S = 120.0  # one file's bound in its reader (the 156-page annual report reads in about 0.5 s)
MEMORY_TEXTS = 64  # texts kept in memory; the rest come from the disk store
ERROR_TTL = 30.0  # a file's read error is its answer for this long (then it is read again)

Stamp = tuple[str, int, int]  # resolved path, size, mtime_ns


def stamp_of(path: ReportPath) -> Stamp:
    """The file ``path`` names as a stamp, once it is allowed (``documents.locate``: a stat)."""
    real = locate(path)
    st = real.stat()
    return str(real), st.st_size, st.st_mtime_ns


@dataclass
class _Job:
    stamp: Stamp
    max_bytes: int
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


@dataclass
class _Worker:
    process: Any
    conn: multiprocessing.connection.Connection
    job: _Job | None = None
    since: float = 0.0


def _serve(conn: multiprocessing.connection.Connection, read: Callable[[str, int], tuple[str, str]]) -> None:
    """A reader process: read each file it is sent, answer ``("ok", digest, text)`` or ``("error", message)``."""
    while True:
        try:
            path, max_bytes = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        try:
            digest, text = read(path, max_bytes)
            answer: tuple[Any, ...] = ("ok", digest, text)
        except InputError as e:
            answer = ("error", e.message)
        except Exception as e:  # a reader's failure is the file's error, never the reader's end
            answer = ("error", f"{os.path.basename(path)}: cannot be read ({e.__class__.__name__}: {e})")
        try:
            conn.send(answer)
        except (OSError, KeyboardInterrupt):
            return


class Reader:
    """The report files of one core (a batcher): texts by stamp, read in reader processes."""

    def __init__(self, cache: Cache, *, processes: int | None = None, timeout: float = READ_TIMEOUT_S,
                 read: Callable[[str, int], tuple[str, str]] = read_file, python: str | None = None):
        """``read``: what a reader process runs for a file (a module-level function: digest and text);
        ``python``: the interpreter of the reader processes (inside LibreOffice, not its own program)."""
        self.cache = cache
        self.read = read
        self.python = python
        self.processes = max(1, processes or os.cpu_count() or 1)
        self.timeout = timeout
        self.files_read = 0  # files parsed by a reader process in this run
        self.from_store = 0  # texts found in the disk store (no file opened)
        self._lock = threading.Lock()
        self._texts: collections.OrderedDict[Stamp, str] = collections.OrderedDict()
        self._errors: dict[Stamp, tuple[float, InputError]] = {}
        self._reading: dict[Stamp, _Job] = {}
        self._queue: collections.deque[_Job] = collections.deque()
        self._workers: list[_Worker] = []
        self._thread: threading.Thread | None = None
        self._wake_r: socket.socket | None = None  # the reader thread's wake-up, made with the thread
        self._wake_w: socket.socket | None = None
        self._closed = False

    def text(self, path: ReportPath) -> tuple[Stamp, str | concurrent.futures.Future]:
        """``path``'s stamp and its text: at once from memory or the disk store, else a future of a
        reader's (one per file, however many ask). Raises ``InputError`` for a file not allowed or
        not found (a stat: no file is opened here)."""
        stamp = stamp_of(path)
        with self._lock:
            known = self._texts.get(stamp)
            if known is not None:
                self._texts.move_to_end(stamp)
                return stamp, known
            failed = self._errors.get(stamp)
            if failed is not None and time.monotonic() - failed[0] < ERROR_TTL:
                raise failed[1]
            job = self._reading.get(stamp)
            if job is not None:
                return stamp, job.future
        stored = self._stored(stamp)
        if stored is not None:
            self._keep(stamp, stored)
            return stamp, stored
        with self._lock:
            if self._closed:
                raise InputError(FIELD, f"{os.path.basename(stamp[0])}: not read (the run is ending)")
            job = self._reading.get(stamp)
            if job is None:
                job = self._reading[stamp] = _Job(stamp, path.reports.max_bytes)
                self._queue.append(job)
                if self._thread is None:
                    if self._wake_r is None:
                        self._wake_r, self._wake_w = socket.socketpair()
                    self._thread = threading.Thread(target=self._dispatch, name="xladdin-readers", daemon=True)
                    self._thread.start()
        self._wake()
        return stamp, job.future

    # the disk store: stamp → digest → compressed text
    def _stored(self, stamp: Stamp) -> str | None:
        digest = self.cache.get_document("stamp:" + repr(stamp))
        packed = self.cache.get_document("text:" + digest) if digest else None
        if packed is None:
            return None
        with self._lock:
            self.from_store += 1
        return zlib.decompress(packed).decode("utf-8")

    def _store(self, stamp: Stamp, digest: str, text: str) -> None:
        self.cache.set_document("text:" + digest, zlib.compress(text.encode("utf-8"), 1))
        self.cache.set_document("stamp:" + repr(stamp), digest)

    def _keep(self, stamp: Stamp, text: str) -> None:
        with self._lock:
            self._texts[stamp] = text
            while len(self._texts) > MEMORY_TEXTS:
                self._texts.popitem(last=False)

    # the reader processes, run from one thread
    def _wake(self) -> None:
        try:
            if self._wake_w is not None:
                self._wake_w.send(b"x")
        except OSError:
            pass

    def _spawn(self) -> _Worker:
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if self.python:
            ctx.set_executable(self.python)
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(child, self.read), name="xladdin-reader", daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def _dispatch(self) -> None:
        try:
            self._serve_files()
        except Exception as e:  # readers that cannot start: every file waiting is its row's error
            log.exception("report readers failed")
            with self._lock:
                self._thread = None
                waiting = list(self._reading.values())
                self._reading.clear()
                self._queue.clear()
            for job in waiting:
                if not job.future.done():
                    job.future.set_exception(InputError(FIELD, f"{os.path.basename(job.stamp[0])}: not read (the "
                                                        f"report readers failed: {e.__class__.__name__}: {e})"))

    def _serve_files(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                while self._queue:
                    idle = next((w for w in self._workers if w.job is None), None)
                    if idle is None and len(self._workers) < self.processes:
                        idle = self._spawn()
                        self._workers.append(idle)
                    if idle is None:
                        break
                    job = self._queue.popleft()
                    try:
                        idle.conn.send((job.stamp[0], job.max_bytes))
                    except OSError:  # a reader gone while idle: replaced, the file sent again
                        self._queue.appendleft(job)
                        self._replace(idle)
                        continue
                    idle.job, idle.since = job, time.monotonic()
                busy = [w for w in self._workers if w.job is not None]
            now = time.monotonic()
            wait = min((w.since + self.timeout - now for w in busy), default=None)
            objects: list[Any] = [self._wake_r]
            for w in busy:
                objects += [w.conn, w.process.sentinel]
            ready = multiprocessing.connection.wait(objects, None if wait is None else max(0.0, wait))
            if self._wake_r in ready:
                try:
                    self._wake_r.recv(4096)
                except OSError:
                    return
            for w in busy:
                if w.conn in ready:
                    self._answer(w)
                elif w.process.sentinel in ready:
                    self._fail(w, "crashed the report reader (a damaged file?)")
                elif time.monotonic() - w.since >= self.timeout:
                    self._fail(w, f"reading it took longer than {self.timeout:g}s (a damaged file?)")

    def _answer(self, w: _Worker) -> None:
        job = w.job
        assert job is not None
        try:
            answer = w.conn.recv()
        except (EOFError, OSError):
            self._fail(w, "crashed the report reader (a damaged file?)")
            return
        w.job = None
        if answer[0] == "ok":
            _, digest, text = answer
            self._store(job.stamp, digest, text)
            self._keep(job.stamp, text)
            with self._lock:
                self.files_read += 1
                self._reading.pop(job.stamp, None)
            job.future.set_result(text)
        else:
            self._settle_error(job, InputError(FIELD, answer[1]))

    def _fail(self, w: _Worker, why: str) -> None:
        job = w.job
        assert job is not None
        with self._lock:
            self._replace(w)
        self._settle_error(job, InputError(FIELD, f"{os.path.basename(job.stamp[0])} {why}"))

    def _replace(self, w: _Worker) -> None:
        """End ``w`` (hung, crashed or gone); the next file starts a new reader. Under the lock."""
        w.process.kill()
        w.process.join(5)
        w.conn.close()
        self._workers.remove(w)

    def _settle_error(self, job: _Job, error: InputError) -> None:
        with self._lock:
            self._errors = {k: v for k, v in self._errors.items() if time.monotonic() - v[0] < ERROR_TTL}
            self._errors[job.stamp] = (time.monotonic(), error)
            self._reading.pop(job.stamp, None)
        job.future.set_exception(error)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"files_read": self.files_read, "files_from_store": self.from_store,
                    "files_reading": len(self._reading)}

    def close(self) -> None:
        """Every reader process ended now; files still waiting are their rows' errors."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
            waiting = list(self._reading.values())
            self._reading.clear()
            self._queue.clear()
        self._wake()
        for w in workers:
            w.process.kill()
        for w in workers:
            w.process.join(5)
            w.conn.close()
        for job in waiting:
            if not job.future.done():
                job.future.set_exception(InputError(FIELD, f"{os.path.basename(job.stamp[0])}: not read (the run "
                                                    "ended first)"))
        if self._thread is not None:
            self._thread.join(5)
        for end in (self._wake_r, self._wake_w):
            if end is not None:
                end.close()
