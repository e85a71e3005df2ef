"""The core, as the front doors see it: the one module they import (its names imported when first used, so a
report reader process that imports ``core.readers`` loads nothing else).

What a door uses: a ``Batcher`` (``started`` for a job's), a ``Resolver`` over it (``resolve``: ``Done``,
``Pending`` with the request's future, ``Failed``; ``map`` for a table; ``Pacer`` for calls run later), the
disk ``Cache``, and the report files' readers (``Reader``; ``read_texts``/``texts_or_errors`` for a folder;
``stamp_of``, ``stored``/``store`` for a Ray actor's own reads). Inside, each module holds one thing:

- ``resolver``: a request's way in (by its input) and a table's;
- ``batcher``: when requests reach the engine (each request's coroutine, the queue, its window, its workers);
- ``requests``: one request sized, prepared and asked (``ContextFit``, ``Requests``, ``structured_call``);
- ``fates``: the one table of every request's future, and the failures a reader remembers;
- ``cache``: the disk cache;
- ``window``: how many requests the engine is given at once, and the queue;
- ``readers``: report files read in reader processes (``reader_process``: one such process);
- ``threads``: the threads the work runs on (the loop, the disk's, the rows').
"""

from __future__ import annotations

from ..lazy import lazy

_LAZY = {
    "Batcher": ".batcher",
    "ContextFit": ".requests",
    "Prepared": ".requests",
    "Requests": ".requests",
    "ask_again": ".requests",
    "started": ".batcher",
    "Cache": ".cache",
    "cache_key": ".cache",
    "remove_cache_files": ".cache",
    "Reader": ".readers",
    "read_texts": ".readers",
    "texts_or_errors": ".readers",
    "stamp_of": ".readers",
    "stored": ".readers",
    "store": ".readers",
    "Done": ".resolver",
    "Failed": ".resolver",
    "Pacer": ".resolver",
    "Pending": ".resolver",
    "Resolver": ".resolver",
    "on_serial_thread": ".threads",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy(__name__, _LAZY)
