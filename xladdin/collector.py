"""Python's cyclic garbage collector, set for a process that asks many requests.

A request allocates thousands of short-lived containers (pydantic models, dicts, futures) that its
reference counts free; they are no cycles, yet with Python's default threshold (700) the youngest
generation is collected every few rows, and the older generations, collected in turn, walk every
live object each time (the results a table keeps, the cache's pages). The processes the doors own
(the ``xladdin`` command; a cell door's: Excel's UDF server, LibreOffice's Python for Calc, the cell
service) raise the youngest generation's threshold to ``YOUNG`` once (``for_many_requests``); a table
(``Resolver.map``: the CLI, pandas, eval, the nightly run) raises it for its own duration and puts it back
(``relaxed``), since it may run in a user's process. Measured side by side: ``python -m bench collector``."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

YOUNG = 10_000  # containers allocated (net) between two collections of the youngest generation


def for_many_requests() -> None:
    """The youngest generation's threshold raised to ``YOUNG``, never lowered (nor set where a user has
    turned collection off: a threshold of 0)."""
    young, *older = gc.get_threshold()
    if 0 < young < YOUNG:
        gc.set_threshold(YOUNG, *older)


@contextlib.contextmanager
def relaxed() -> Iterator[None]:
    """``for_many_requests`` for the block, then the thresholds as they were."""
    before = gc.get_threshold()
    for_many_requests()
    try:
        yield
    finally:
        gc.set_threshold(*before)
