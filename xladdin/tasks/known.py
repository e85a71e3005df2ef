"""Readings of a text made elsewhere: a report reader process reads a file's key-figure tables and
its prose figures beside its text (``readers.Reader``), so the process that asks the engine does not
read them again (on a whole annual report they are most of a row's CPU). ``tables.read_key_tables``
and ``figures`` return what is remembered here for a text before reading it themselves."""

from __future__ import annotations

import collections
import threading
from typing import Any

TEXTS = 64  # texts remembered: each is used when its row is prepared, right after its file is read

_known: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
_lock = threading.Lock()


def remember(text: str, readings: dict[str, Any]) -> None:
    with _lock:
        _known[text] = readings
        while len(_known) > TEXTS:
            _known.popitem(last=False)


def get(text: str, name: str) -> Any:
    """What was read of ``text`` under ``name`` (``tables``, ``prose``), else ``None``."""
    with _lock:
        found = _known.get(text)
    return None if found is None else found.get(name)


def cache_clear() -> None:
    with _lock:
        _known.clear()
