"""Report files read once, on every core, never on the caller's thread.

A report's text is known by its stamp — the resolved path, size and modification time: a stat, no
read — in memory, then in the cache's ``documents`` store (stamp → the content's sha256 → the
text, and code's readings of it), so a rerun, a reopened workbook or another process parses no file
it has read before. A file not read yet is read in a reader process (pypdfium2 is not thread-safe:
one process per core, started when the first file needs one; plain processes of this Python running
``main``, not multiprocessing's spawn, which would run a user's script again in each). A reader also
makes code's readings of the text (its tables and prose figures: most of a row's CPU on a whole
annual report) and sends them with it: the text is handed on as a ``Document`` carrying them, so the
process that asks the engine reads none of them again. The text comes back as a
future: the request goes to the engine as soon as its file is read, while the others are read.
A text found or read is handed to its rows on the reader's texts thread (``SerialThread``): their
requests are prepared there (a whole report's excerpt and readings), never on the disk thread, whose
reads other rows wait for, nor on the thread that serves the reader processes.

A file that hangs its reader (longer than ``timeout``) or crashes it (a malformed PDF) is that
file's ``InputError`` naming it; its reader is replaced and the other files go on. ``close`` ends
every reader process at once (Ctrl-C, the end of a run).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import multiprocessing.connection
import os
import pickle
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..reading import figures
from ..reading.document import Document
from ..reading.documents import FIELD, InputError, ReportPath, Reports, edges, locate, read_file
from .cache import Cache
from .fates import Failures, Fate
from .reader_process import Worker, start
from .threads import SerialThread, settle

log = logging.getLogger(__name__)
MEMORY_MIB = 2048  # a reader process's address space (reading the 20 real annual reports peaks at ~180 MiB)
READ_TIMEOUT_S = 120.0  # one file's bound in its reader (the 156-page annual report reads in about 0.5 s)
MEMORY_TEXTS = 64  # texts kept in memory; the rest come from the disk store
IDLE_S = 120.0  # reader processes with nothing to read end after this long (the next file starts them again)
GATHER_S = 0.02  # with no reader running, how long the first file waits for the others of its burst (their
# readers then start together, each in one process start-up time, not one after another)

Stamp = tuple[str, int, int]  # resolved path, size, mtime_ns


def stamp_of(path: ReportPath) -> Stamp:
    """The file ``path`` names as a stamp, once it is allowed (``documents.locate``: a stat)."""
    real, st = locate(path)
    return str(real), st.st_size, st.st_mtime_ns


def on_disk(stamp: Stamp) -> str:
    """What the disk store knows a file by: its stamp and the digest of its content's edges
    (``documents.edges``), so a report replaced by another of the same size, its time put back, is read
    again. The edges are read here, where the store is (the disk thread, a reader's, an actor), never on the
    thread that asked for the stamp."""
    return repr((*stamp, edges(stamp[0], stamp[1])))


@dataclass
class _Job:
    stamp: Stamp
    max_bytes: int
    future: Fate = field(default_factory=Fate)
    run: int = 0  # the reader's run it was asked in: a close ends that run (its jobs failed by it)


def read_texts(open_cache: Callable[[], Cache], allowed: Reports,
               processes: int | None = None, memory_mib: int = MEMORY_MIB) -> Callable[[list[Path]], dict]:
    """``documents.match_reports``'s ``texts``: many files read at once by reader processes (one per core),
    each kept in the store of texts of the cache ``open_cache`` opens (only when there is something to
    read; closed after), where the screen's own reader then finds it (no file parsed twice); a file that
    cannot be read is ``None``."""
    read = texts_or_errors(open_cache, allowed, processes, memory_mib)

    def texts(paths: list[Path]) -> dict[Path, str | None]:
        return {p: text if isinstance(text, str) else None for p, text in read(paths).items()}

    return texts


def texts_or_errors(open_cache: Callable[[], Cache], allowed: Reports, processes: int | None = None,
                    memory_mib: int = MEMORY_MIB) -> Callable[[list[Path]], dict[Path, str | InputError]]:
    """``read_texts`` with a file that cannot be read given as its ``InputError`` (what it is, named), so a
    caller can pass it over with its reason and go on."""

    def texts(paths: list[Path]) -> dict[Path, str | InputError]:
        cache = open_cache()
        reader = Reader(cache, processes=processes, memory_mib=memory_mib)
        try:
            asked: dict[Path, Any] = {}
            for p in paths:
                try:
                    asked[p] = reader.text(ReportPath(str(p), allowed))[1]
                except InputError as e:
                    asked[p] = e
            out: dict[Path, str | InputError] = {}
            for p, text in asked.items():
                try:
                    out[p] = text.result() if isinstance(text, concurrent.futures.Future) else text
                except InputError as e:
                    out[p] = e
            return out
        finally:
            reader.close()
            cache.close()

    return texts


def stored(cache: Cache, stamp: Stamp, version: str) -> tuple[str, Any] | None:
    """The disk store (the cache's ``documents``: stamp → content digest → compressed text, and code's
    readings of it by the reading code's ``version``): ``stamp``'s text and readings, or ``None`` when the
    store has no text for it or no readings by this version of the reading code (kept by an earlier
    one): the file is read again, once, and its readings kept, rather than every run after an upgrade
    scanning each whole text in the process that asks the engine."""
    digest = cache.get_document("stamp:" + on_disk(stamp))
    read = cache.get_document(f"readings:{version}:{digest}") if digest else None
    packed = cache.get_document("text:" + digest) if read is not None else None
    if packed is None:
        return None
    return zlib.decompress(packed).decode("utf-8"), pickle.loads(read)


def store(cache: Cache, stamp: Stamp, digest: str, packed: bytes, read: bytes | None, version: str) -> None:
    """A file's text (``packed``: zlib) and readings (pickled) kept under its digest, found by its stamp."""
    cache.set_document("text:" + digest, packed)
    if read is not None:
        cache.set_document(f"readings:{version}:{digest}", read)
    cache.set_document("stamp:" + on_disk(stamp), digest)


class Reader:
    """The report files of one core (a batcher): texts by stamp, read in reader processes."""

    def __init__(self, cache: Cache, *, processes: int | None = None, timeout: float = READ_TIMEOUT_S,
                 read: Callable[[str, int], tuple[str, str]] = read_file, python: str | None = None,
                 disk: SerialThread | None = None, memory_mib: int = MEMORY_MIB):
        """``read``: what a reader process runs for a file (a module-level function: digest and text);
        ``python``: the interpreter of the reader processes (inside LibreOffice, not its own program);
        ``disk``: the thread the disk store is read on (a batcher's), else the caller's."""
        self.cache = cache
        self.disk = disk
        self.memory_mib = memory_mib  # each reader process's address space (``reader_memory_mib``)
        self.read = read
        self.python = python
        self.idle_s = IDLE_S
        self.processes = max(1, processes or os.cpu_count() or 1)
        self.timeout = timeout
        self.files_read = 0  # files parsed by a reader process (every run of this reader)
        self.from_store = 0  # texts found in the disk store (no file opened)
        self._lock = threading.Lock()
        self._texts: collections.OrderedDict[Stamp, str] = collections.OrderedDict()
        self._errors = Failures()  # a file's read error is its answer for a while (then it is read again)
        self._reading: dict[Stamp, _Job] = {}
        self._queue: collections.deque[_Job] = collections.deque()
        self._workers: list[Worker] = []
        self._thread: threading.Thread | None = None
        self._wake_w: socket.socket | None = None  # the run's thread's wake-up (its other end the thread's own)
        self._closed = False
        self._run = 0  # how many times the reader has closed: a job of an earlier run is failed already
        self._texts_thread = SerialThread("xladdin-texts")  # a text handed to its rows (``_hand_on``)

    @property
    def keeps_results(self) -> bool:
        """Whether a report row's result may be kept and looked for by its file's stamp (``Resolver``): read on
        the disk thread, which this reader has only with a batcher's."""
        return self.disk is not None

    def stamp(self, path: ReportPath) -> Stamp:
        """``path``'s stamp (``stamp_of``: a stat; raises ``InputError`` for a file not allowed or not found)."""
        return stamp_of(path)

    def text(self, path: ReportPath, stamp: Stamp | None = None) -> tuple[Stamp, str | concurrent.futures.Future]:
        """``path``'s stamp and its text: at once from memory, else a future (one per file, however many
        ask) of the disk store's text or else a reader's. With a disk thread (a batcher's) the store is
        read there, never on this thread; without one it is read here, and a text found is returned.
        Raises ``InputError`` for a file not allowed or not found (a stat: no file is opened here); ``stamp``:
        the one its caller took (no stat again)."""
        stamp = stamp_of(path) if stamp is None else stamp
        with self._lock:
            known = self._texts.get(stamp)
            if known is not None:
                self._texts.move_to_end(stamp)
                return stamp, known
            failed = self._errors.get(stamp)
            if failed is not None:
                raise failed
            job = self._reading.get(stamp)
            if job is not None:
                return stamp, job.future
            if self._closed:
                raise InputError(FIELD, f"{os.path.basename(stamp[0])}: not read (the run is ending)")
            job = self._reading[stamp] = _Job(stamp, path.reports.max_bytes, run=self._run)
        if self.disk is not None:
            if not self.disk.post(self._look, job):
                self._look(job)
            return stamp, job.future
        self._look(job)
        if job.future.done() and job.future.exception() is None:
            return stamp, job.future.result()
        return stamp, job.future

    def _look(self, job: _Job) -> None:
        """``job``'s file in the disk store (its text kept, the job done on the texts thread), else sent to
        a reader (so is a file whose stored text cannot be read back: read again)."""
        try:
            found = self._stored(job.stamp)
        except Exception as e:  # a damaged entry (its text does not decompress, its readings do not load)
            log.warning("report text of %s in the store not readable, read again: %s", job.stamp[0], e)
            found = None
        if found is None:
            self._to_reader(job)
            return
        self._keep(job.stamp, found)
        self._hand_on(job, found, here=self.disk is None)

    def _hand_on(self, job: _Job, text: str, *, here: bool = False) -> None:
        """``job``'s rows given ``text``: on the texts thread (the future's callbacks run there, not on the
        disk thread); ``here``: on this thread (a reader without a disk thread). The
        job leaves the files being read and is queued on the texts thread under the lock ``close`` takes,
        so either ``close`` fails it or the texts thread has it before ``close`` closes that thread."""
        def deliver() -> None:
            settle(job.future, text)

        with self._lock:  # queued under the lock; never run holding it (a row's callbacks may ask for texts)
            failed = self._over(job.run)  # ``close`` has failed it already
            if not failed and self._reading.get(job.stamp) is job:
                del self._reading[job.stamp]
            queued = not failed and not here and self._texts_thread.post(deliver)
        if not failed and not queued:  # no disk thread, or the interpreter is exiting
            deliver()

    def _to_reader(self, job: _Job) -> None:
        job.future.looked = True  # not in the store: a reader process reads it (a waiting cell waits no more)
        started: RuntimeError | None = None  # the run's thread would not start
        with self._lock:
            if self._over(job.run):
                closed = InputError(FIELD, f"{os.path.basename(job.stamp[0])}: not read (the run is ending)")
            else:
                closed = None
                self._queue.append(job)
                if self._thread is None:  # this run's thread, with its own wake-up
                    wake_r, self._wake_w = socket.socketpair()
                    self._thread = threading.Thread(target=self._dispatch, args=(self._run, wake_r),
                                                    name="xladdin-readers", daemon=True)
                    try:
                        self._thread.start()
                    except RuntimeError as e:  # no thread to be had: this run's files are their rows' errors
                        started = e
                        wake_r.close()
        if closed is not None:
            settle(job.future, closed, error=True)
            return
        if started is not None:
            self._readers_failed(job.run, started)
            return
        self._wake()

    def read_now(self, path: ReportPath) -> str:
        """``path``'s text, waited for (a reader process reads it, or memory or the store has it): kept as
        ``text`` keeps it, so the row's request finds it read. Raises the file's ``InputError``."""
        _, text = self.text(path)
        return text if isinstance(text, str) else text.result()

    # the disk store (``stored`` / ``store``)
    def _stored(self, stamp: Stamp) -> Document | None:
        found = stored(self.cache, stamp, self._version)
        if found is None:
            return None
        with self._lock:
            self.from_store += 1
        text, readings = found
        return figures.with_readings(text, readings)

    def _store(self, stamp: Stamp, digest: str, packed: bytes, read: bytes | None) -> None:
        store(self.cache, stamp, digest, packed, read, self._version)

    @functools.cached_property
    def _version(self) -> str:
        return figures.readings_version()

    def _keep(self, stamp: Stamp, text: str) -> None:
        with self._lock:
            self._texts[stamp] = text
            while len(self._texts) > MEMORY_TEXTS:
                self._texts.popitem(last=False)

    # the reader processes, run from one thread
    def _over(self, run: int) -> bool:
        """Run ``run`` (a job's, a thread's) is ending (``close`` is under way) or over (closed since): its
        jobs are failed by ``close``. Under the lock."""
        return self._closed or run != self._run

    def _wake(self, end: socket.socket | None = None) -> None:
        """Wake the run's thread through ``end`` (default the run's wake-up)."""
        if end is None:
            end = self._wake_w
        try:
            if end is not None:
                end.send(b"x")
        except OSError:
            pass

    def _spawn(self, n: int = 1) -> list[Worker]:
        """``n`` reader processes, started together (``reader_process.start``)."""
        return start(n, self.python, self.read, self.memory_mib)

    def _wanted(self) -> int:
        """How many more reader processes the files waiting need (under the lock): one a file beyond those
        the idle readers take, up to ``processes`` in all."""
        idle = sum(w.job is None for w in self._workers)
        return min(len(self._queue) - idle, self.processes - len(self._workers))

    def _dispatch(self, run: int, wake_r: socket.socket) -> None:
        """Run ``run``'s thread: it serves files until that run is over (a run closed and the reader asked
        again has a thread of its own; this one, however late it ends, touches nothing of it)."""
        try:
            self._serve_files(run, wake_r)
        except Exception as e:  # readers that cannot start: every file waiting is its row's error
            self._readers_failed(run, e)
        finally:
            wake_r.close()

    def _readers_failed(self, run: int, e: Exception) -> None:
        """Run ``run``'s readers cannot be had (its thread or a process would not start): every file waiting
        is its row's error, and the next file asked for tries again."""
        wake_w = None
        with self._lock:
            over = self._over(run)  # ``close`` has failed its files already (and ended its readers)
            waiting = [] if over else list(self._reading.values())
            if not over:
                self._thread, wake_w, self._wake_w = None, self._wake_w, None
                self._reading.clear()
                self._queue.clear()
        if not over:
            log.error("report readers failed: %s: %s", e.__class__.__name__, e, exc_info=e)
            if wake_w is not None:
                wake_w.close()
        for job in waiting:
            settle(job.future, InputError(FIELD, f"{os.path.basename(job.stamp[0])}: not read (the report "
                                          f"readers failed: {e.__class__.__name__}: {e})"), error=True)

    def _serve_files(self, run: int, wake_r: socket.socket) -> None:
        while True:
            with self._lock:
                if self._over(run):  # a later run's files and readers are its own thread's
                    return
                wanted = self._wanted()
                first = wanted > 0 and not self._workers
            if first:  # no reader yet: the files of a table asked in one burst are all waiting after a moment,
                time.sleep(GATHER_S)  # and their readers start together
                with self._lock:
                    wanted = self._wanted()
            if wanted > 0:  # the readers the files waiting need, started together outside the lock: asking
                # for a text never waits on it
                started = self._spawn(wanted)
                with self._lock:
                    closed = self._over(run)
                    if not closed:
                        self._workers.extend(started)
                if closed:
                    for worker in started:
                        worker.process.kill()
                        worker.process.wait(5)
                        worker.conn.close()
                    return
            with self._lock:
                if self._over(run):
                    return
                while self._queue:
                    idle = next((w for w in self._workers if w.job is None), None)
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
                more = bool(self._queue) and len(self._workers) < self.processes
                idle = not busy and not self._queue and bool(self._workers)
            now = time.monotonic()
            wait = 0.0 if more else min((w.since + self.timeout - now for w in busy), default=None)
            if idle:  # nothing to read: the readers end after a while (a sheet open all day holds none)
                wait = self.idle_s
            objects: list[Any] = [wake_r, *(w.conn for w in busy)]  # a reader that dies closes its end
            ready = multiprocessing.connection.wait(objects, None if wait is None else max(0.0, wait))
            with self._lock:
                if self._over(run):  # ``close`` has ended its readers and failed its files
                    return
                if idle and not ready:
                    for w in [w for w in self._workers if w.job is None] if not self._queue else []:
                        self._replace(w)
                    continue
            if wake_r in ready:
                try:
                    wake_r.recv(4096)
                except OSError:
                    return
            for w in busy:
                if w.conn in ready:
                    self._answer(w)
                elif time.monotonic() - w.since >= self.timeout:
                    self._fail(w, f"reading it took longer than {self.timeout:g}s (a damaged file?)")

    def _answer(self, w: Worker) -> None:
        job = w.job
        assert job is not None
        try:
            answer = w.conn.recv()
        except (EOFError, OSError):
            self._fail(w, f"crashed the report reader (a damaged file, or one needing more than its "
                          f"{self.memory_mib} MiB: reader_memory_mib)")
            return
        w.job = None
        if answer[0] == "ok":
            _, digest, text, packed, read = answer
            # the text with code's readings of it: the row's preparation, right after this, reads none again
            text = figures.with_readings(text, None if read is None else pickle.loads(read))
            self._store(job.stamp, digest, packed, read)
            self._keep(job.stamp, text)
            with self._lock:
                self.files_read += 1
            self._hand_on(job, text)
        else:
            self._settle_error(job, InputError(FIELD, answer[1]))

    def _fail(self, w: Worker, why: str) -> None:
        job = w.job
        assert job is not None
        with self._lock:
            self._replace(w)
        self._settle_error(job, InputError(FIELD, f"{os.path.basename(job.stamp[0])} {why}"))

    def _replace(self, w: Worker) -> None:
        """End ``w`` (hung, crashed or gone); the next file starts a new reader. Under the lock."""
        w.process.kill()
        w.process.wait(5)
        w.conn.close()
        if w in self._workers:  # (``close`` may have taken them all)
            self._workers.remove(w)

    def _settle_error(self, job: _Job, error: InputError) -> None:
        with self._lock:
            if self._over(job.run):  # failed by ``close`` already: its reader's end is no fact about the file
                return
            self._errors.put(job.stamp, error)
            if self._reading.get(job.stamp) is job:  # not a later run's job of the same file
                del self._reading[job.stamp]
        settle(job.future, error, error=True)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"files_read": self.files_read, "files_from_store": self.from_store,
                    "files_reading": len(self._reading)}

    def close(self) -> None:
        """Every reader process ended now; files still waiting are their rows' errors (``reopen``
        starts another run)."""
        with self._lock:
            self._closed = True
            self._run += 1
            workers, self._workers = self._workers, []
            waiting = list(self._reading.values())
            self._reading.clear()
            self._queue.clear()
            thread, wake_w = self._thread, self._wake_w  # the run's thread closes its own end when it returns
            self._thread = self._wake_w = None
        if wake_w is not None:
            self._wake(wake_w)
            wake_w.close()
        for job in waiting:  # first: nothing below may leave a row waiting
            settle(job.future, InputError(FIELD, f"{os.path.basename(job.stamp[0])}: not read (the run ended "
                                          "first)"), error=True)
        try:
            for w in workers:
                w.process.kill()
            for w in workers:
                try:
                    w.process.wait(5)
                finally:
                    w.conn.close()
            if thread is not None:
                thread.join(5)  # one that will not end (a reader still starting) ends on its own: its run is over
        finally:
            self._texts_thread.close()  # the texts already read reach their rows first

    def reopen(self) -> None:
        """After ``close`` (a batcher used again): the next file asked for starts readers again. Until
        then every file asked for is its row's error ("the run is ending")."""
        with self._lock:
            self._closed = False
