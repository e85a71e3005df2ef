"""The disk cache of validated model answers (``Cache``), and of the report texts read (its documents store).

Key = sha256 of the canonical JSON of (task name, task version, task config,
model id, sampling params, validated input). Values are the model's validated
output, so a result is rebuilt from it by the task's deterministic rules.
diskcache is safe across threads and processes, so several Excel sessions and
a nightly run can share one directory. An unusable directory degrades to no
cache with a warning; nothing else fails; a folder another user made that this
user may only read is read (``_Reading``). Every value is stored sealed: its pickle
after the sha256 of it (``seal``); one that does not open (a bit flipped on the disk,
a value cut short) is a miss, counted (``damaged``) and removed, so it is made again.
A batcher reads and writes it on its disk thread (``threads.SerialThread``) only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pickle
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

log = logging.getLogger(__name__)
META = "meta"  # the side store's folder inside the cache directory
DOCUMENTS = "documents"  # the report files' texts (readers.Reader), by stamp and content digest
MARKER = "XLADDIN-CACHE.txt"  # written in a cache folder xladdin made: the only kind it opens and clears
MARKER_TEXT = ("This folder is xladdin's answer cache: `xladdin cache clear` empties it, and xladdin opens no\n"
               "folder holding a cache.db without this file.\n")
# What diskcache itself writes in a directory: its database (with SQLite's journal files) and the value
# files of large entries, two levels of two-hex-digit folders deep (diskcache ``Disk.filename``).
_DATABASE = re.compile(r"^cache\.db(-wal|-shm|-journal)?$")
_HEX_DIR = re.compile(r"^[0-9a-f]{2}$")
_VALUE_FILE = re.compile(r"^[0-9a-f]{28}\.val$")


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)


def cache_key(
    *, task: str, task_version: str, task_config: dict[str, Any], model: str, params: dict[str, Any],
    inp: BaseModel | dict[str, Any],
) -> str:
    data = inp.model_dump(mode="json") if isinstance(inp, BaseModel) else inp
    payload = {"task": task, "version": task_version, "config": task_config, "model": model,
               "params": params, "input": data}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def foreign(directory: Path) -> str | None:
    """Why ``directory`` is not a folder xladdin may keep its cache in (it holds a ``cache.db`` another
    program made), or ``None``: a new or empty folder, or one xladdin made (its ``MARKER``, or an xladdin
    cache made before the marker: its side store beside its database)."""
    d = Path(directory)
    if (d / MARKER).is_file() or not (d / "cache.db").exists():
        return None
    if (d / META / "cache.db").is_file():  # an xladdin cache made before the marker
        return None
    return (f"{d} holds a cache.db xladdin did not make (another program's): it is neither opened nor cleared; "
            "choose another folder (--cache-dir, XLADDIN_CACHE_DIR)")


def _mark(directory: Path) -> None:
    marker = Path(directory) / MARKER
    if not marker.is_file():
        marker.write_text(MARKER_TEXT, encoding="utf-8")


_DIGEST = 32  # bytes of a sealed value's sha256, before its pickle


def seal(value: Any) -> bytes:
    """``value`` as stored: the sha256 of its pickle, then the pickle (diskcache keeps bytes as they are)."""
    packed = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return hashlib.sha256(packed).digest() + packed


class Damaged(Exception):
    """A stored value that does not open: not sealed as ``seal`` seals, or its digest not its pickle's."""


def unseal(raw: bytes) -> Any:
    """The value ``seal`` stored in ``raw``; ``Damaged`` when it is not that."""
    if len(raw) <= _DIGEST:
        raise Damaged("not a sealed value")
    packed = raw[_DIGEST:]
    if hashlib.sha256(packed).digest() != raw[:_DIGEST]:
        raise Damaged("its digest does not match")
    try:
        return pickle.loads(packed)  # noqa: S301 (the pickle is the one this cache sealed: its digest matched)
    except Exception as e:
        raise Damaged(f"{e.__class__.__name__}: {e}") from None


class Cache:
    """Thread-safe facade over ``diskcache.Cache``; counts hits and misses of this process. It opens only a
    folder of its own (``foreign``: ``refused`` says why not, and nothing is written there), marking it;
    ``read_only`` (``xladdin cache stats``): a folder that is not there is not made."""

    def __init__(self, directory: Path | None, *, enabled: bool = True, read_only: bool = False):
        self.directory = directory
        self.hits = 0
        self.misses = 0
        self.warning: str | None = None
        self.refused = foreign(directory) if enabled and directory is not None else None
        if self.refused is not None:
            enabled = False
            self.warning = f"cache disabled: {self.refused}"
            log.warning(self.warning)
        elif read_only and directory is not None and not Path(directory).is_dir():
            enabled = False
            self.warning = f"no cache at {directory}"
        self.write_failures = 0  # answers that could not be stored (a full disk, say)
        self.damaged = 0  # entries that did not open (``unseal``): each a miss, made again
        self.writable = True  # False: a folder this user may only read (``_Reading``), its answers used
        self._lock = threading.Lock()
        self._dc = None
        self._meta = None  # small side store (model id per server URL), so entries are len(_dc)
        self._documents = None
        if enabled and directory is not None:
            try:
                import diskcache

                Path(directory).mkdir(parents=True, exist_ok=True)
                _mark(directory)
                self._dc = diskcache.Cache(str(directory), size_limit=2**34, eviction_policy="least-recently-stored")
                self._meta = diskcache.Cache(str(Path(directory) / META))
                self._meta.set("probe", 1)  # fails here, not later, when the directory is read-only
                self._documents = diskcache.Cache(str(Path(directory) / DOCUMENTS), size_limit=2**32)
                _share_with_group(Path(directory))
            except Exception as e:  # unwritable, read-only, corrupt: read what is there, else no cache
                for store in (self._dc, self._meta, self._documents):
                    if store is not None:
                        store.close()
                self._dc = self._meta = self._documents = None
                self._read_only(Path(directory), e)

    def _read_only(self, directory: Path, e: Exception) -> None:
        """The cache opened for reading only, when this user may not write it (a colleague's, shared):
        its answers are hits, nothing new is stored; else no cache, with ``e`` said."""
        why = f"{e.__class__.__name__}: {e}"
        try:
            if not (directory / "cache.db").is_file():
                raise FileNotFoundError("no cache.db")
            self._dc = _Reading(directory)
            self._meta = _Reading(directory / META) if (directory / META / "cache.db").is_file() else None
            self._documents = (_Reading(directory / DOCUMENTS)
                               if (directory / DOCUMENTS / "cache.db").is_file() else None)
        except Exception as e2:
            self._dc = self._meta = self._documents = None
            self.warning = f"cache disabled: cannot use {directory} ({why}; {e2.__class__.__name__}: {e2})"
            log.warning(self.warning)
            return
        self.writable = False
        self.warning = (f"cache at {directory} read only: this user may not write it ({why}); its answers are "
                        "used, new ones are not stored (to share it, make the folder writable by its group: "
                        "docs/cache-and-failures.md)")
        log.warning(self.warning)

    @property
    def enabled(self) -> bool:
        return self._dc is not None

    def get(self, key: str) -> dict[str, Any] | None:
        value = self._open(self._dc, key)
        with self._lock:
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
        return value

    def _open(self, store: Any, key: str) -> Any:
        """The value stored under ``key`` in ``store``, or ``None``: none, unreadable, or damaged (counted, and
        removed so that it is made again)."""
        if store is None:
            return None
        try:
            raw = store.get(key)
        except Exception as e:
            log.warning("cache read failed: %s", e)
            return None
        if raw is None or not isinstance(raw, bytes):  # none, or kept by an older version: a miss, not damage
            return None
        try:
            return unseal(raw)
        except Damaged as e:
            with self._lock:
                self.damaged += 1
            log.warning("a damaged cache entry is made again (%s)", e)
            try:
                store.delete(key)
            except Exception:
                pass
            return None

    def set(self, key: str, value: dict[str, Any]) -> None:
        if self._dc is None or not self.writable:
            return
        try:
            self._dc.set(key, seal(value))
        except Exception as e:
            with self._lock:
                self.write_failures += 1
            log.warning("cache write failed: %s", e)

    def set_many(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        """``set`` of each item, in one transaction (one write to the disk for them all)."""
        if self._dc is not None and self.writable:
            _in_one(self._dc, items, self.set)

    def get_meta(self, name: str) -> Any:
        return self._open(self._meta, name)

    def set_meta(self, name: str, value: Any) -> None:
        if self._meta is not None and self.writable:
            self._meta.set(name, seal(value))

    def get_document(self, key: str) -> Any:
        return self._open(self._documents, key)

    def set_document(self, key: str, value: Any) -> None:
        if self._documents is None or not self.writable:
            return
        try:
            self._documents.set(key, seal(value))
        except Exception as e:
            log.warning("cache write failed: %s", e)

    def set_documents(self, items: list[tuple[str, Any]]) -> None:
        """``set_document`` of each item, in one transaction."""
        if self._documents is not None and self.writable:
            _in_one(self._documents, items, self.set_document)

    def stats(self) -> dict[str, Any]:
        entries = 0
        size = 0
        if self._dc is not None:
            entries = len(self._dc)
            size = self._dc.volume()
        lookups = self.hits + self.misses
        return {
            "directory": str(self.directory),
            "enabled": self.enabled,
            "entries": entries,
            "bytes": size,
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": round(self.hits / lookups, 4) if lookups else None,
            "damaged": self.damaged,
            "writable": self.enabled and self.writable,
        }

    def clear(self) -> int:
        """Remove every answer (and the report texts read); returns how many answers."""
        if self._dc is None:
            return 0
        if not self.writable:
            raise PermissionError(f"{self.directory} is read only for this user: not cleared")
        if self._documents is not None:
            self._documents.clear()
        return self._dc.clear()

    def close(self) -> None:
        for store in (self._dc, self._meta, self._documents):
            if store is not None:
                store.close()


def _share_with_group(directory: Path) -> None:
    """A folder its owner made writable by its group (``chmod g+ws``: a cache shared by colleagues): the
    databases in it made writable by the group too (SQLite gives its journal files the database's mode),
    whatever this process's umask; else nothing."""
    try:
        if not directory.stat().st_mode & stat.S_IWGRP:
            return
        for db in (directory / "cache.db", directory / META / "cache.db", directory / DOCUMENTS / "cache.db"):
            for path in (db.parent, db):
                st = path.stat()
                if st.st_uid == os.getuid() and not st.st_mode & stat.S_IWGRP:
                    path.chmod(stat.S_IMODE(st.st_mode) | stat.S_IRGRP | stat.S_IWGRP)
    except (OSError, AttributeError) as e:  # another's file; Windows (no uid, no group bits)
        log.debug("the cache's group write bits not set: %s", e)


class _Reading:
    """A diskcache store opened for reading only, with SQLite's read-only mode (``immutable`` where even its
    lock files cannot be made): ``get`` as diskcache's own, through its ``Disk``; writes are refused. A value
    caught mid-write by its owner does not unseal: a miss."""

    def __init__(self, directory: Path):
        import sqlite3

        import diskcache

        db = (directory / "cache.db").resolve()
        try:
            self._sql = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, check_same_thread=False)
            self._sql.execute("SELECT count(*) FROM Cache").fetchone()
        except sqlite3.Error:  # its -shm cannot be made in a folder this user may not write
            self._sql = sqlite3.connect(f"{db.as_uri()}?immutable=1", uri=True, check_same_thread=False)
            self._sql.execute("SELECT count(*) FROM Cache").fetchone()
        self._disk = diskcache.Disk(str(directory))
        self._lock = threading.Lock()

    def get(self, key: str) -> Any:
        db_key, raw = self._disk.put(key)
        with self._lock:
            rows = self._sql.execute(
                "SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = ?"
                " AND (expire_time IS NULL OR expire_time > ?)", (db_key, raw, time.time())).fetchall()
        if not rows:
            return None
        mode, filename, value = rows[0]
        try:
            return self._disk.fetch(mode, filename, value, False)
        except OSError:
            return None

    def __len__(self) -> int:
        with self._lock:
            return self._sql.execute("SELECT count(*) FROM Cache").fetchone()[0]

    def volume(self) -> int:
        with self._lock:
            return self._sql.execute("SELECT coalesce(sum(size), 0) FROM Cache").fetchone()[0]

    def set(self, key: str, value: Any) -> None:
        raise PermissionError("the cache is read only for this user")

    delete = set

    @contextlib.contextmanager
    def transact(self) -> Iterator[None]:
        yield

    def close(self) -> None:
        self._sql.close()


def _in_one(store: Any, items: list[tuple[str, Any]], set_one: Callable[[str, Any], None]) -> None:
    """``set_one`` of each item in one transaction of ``store`` (a diskcache): one write to the disk for them
    all; when the transaction itself fails (a locked database), each on its own."""
    if not items:
        return
    if len(items) == 1:
        set_one(*items[0])
        return
    try:
        with store.transact():
            for key, value in items:
                set_one(key, value)
    except Exception as e:
        log.warning("cache transaction failed, written one by one: %s", e)
        for key, value in items:
            set_one(key, value)


def _own_files(store: Path) -> tuple[list[Path], list[Path]]:
    """The files diskcache wrote in ``store`` (not below its own value folders' files), and the
    folders it made there, deepest first."""
    files: list[Path] = []
    folders: list[Path] = []
    if not store.is_dir():
        return files, folders
    for entry in store.iterdir():
        if entry.is_file() and not entry.is_symlink() and _DATABASE.match(entry.name):
            files.append(entry)
        elif entry.is_dir() and not entry.is_symlink() and _HEX_DIR.match(entry.name):
            for sub in entry.iterdir():
                if sub.is_dir() and not sub.is_symlink() and _HEX_DIR.match(sub.name):
                    files += [f for f in sub.iterdir() if f.is_file() and not f.is_symlink()
                              and _VALUE_FILE.match(f.name)]
                    folders.append(sub)
            folders.append(entry)
    return files, folders


def remove_cache_files(directory: Path) -> tuple[list[str], list[str]]:
    """Remove the files of the cache at ``directory`` — diskcache's database and value folders, and
    those of the side store (``meta``) — and nothing else: whatever else is there stays. Returns
    (what was removed, what was left), as paths relative to ``directory``. A folder is removed only
    when nothing but the cache's files was in it."""
    directory = Path(directory)
    removed: list[str] = []
    stores = [directory / META, directory / DOCUMENTS, directory]
    for store in stores:
        files, folders = _own_files(store)
        for f in files:
            f.unlink()
            removed.append(f.relative_to(directory).as_posix())
        for folder in folders:  # deepest first; a folder holding anything else is kept
            try:
                folder.rmdir()
            except OSError:
                pass
    for side in (directory / META, directory / DOCUMENTS):
        if side.is_dir() and not side.is_symlink():
            try:
                side.rmdir()
            except OSError:
                pass
    left = sorted(Path(root, name).relative_to(directory).as_posix()
                  for root, _, names in os.walk(directory) for name in names)
    return removed, left
