"""Failures remembered for a while: the one rule of every memory of a failure (a request's, the engine's
start, a report file's read). A failure is the answer, given at once, for ``ERROR_TTL`` seconds (a sheet of
cells recalculated when their request fails would otherwise ask again at once, in a loop; a down engine
would be waited for by every cell in turn); then it is forgotten and the key is tried again."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Hashable

ERROR_TTL = 30.0  # seconds a failure is the answer before its key is tried again
KEPT = 50_000  # failures remembered at most (the oldest forgotten first)


class Failures:
    """Each key's last failure while its ``ttl`` lasts. Thread-safe."""

    def __init__(self, ttl: float = ERROR_TTL, kept: int = KEPT):
        self.ttl, self.kept = ttl, kept
        self._lock = threading.Lock()
        self._failed: collections.OrderedDict[Hashable, tuple[float, BaseException]] = collections.OrderedDict()

    def get(self, key: Hashable) -> BaseException | None:
        """``key``'s failure while its time lasts, else ``None`` (and it is forgotten)."""
        with self._lock:
            failed = self._failed.get(key)
            if failed is None:
                return None
            if time.monotonic() - failed[0] < self.ttl:
                return failed[1]
            del self._failed[key]
            return None

    def put(self, key: Hashable, error: BaseException) -> None:
        """``key`` failed now with ``error``."""
        with self._lock:
            self._failed[key] = (time.monotonic(), error)
            self._failed.move_to_end(key)
            while len(self._failed) > self.kept:
                self._failed.popitem(last=False)

    def forget(self, key: Hashable) -> None:
        """``key`` succeeded: no failure of it is the answer any more."""
        with self._lock:
            self._failed.pop(key, None)

    def __len__(self) -> int:
        return len(self._failed)
