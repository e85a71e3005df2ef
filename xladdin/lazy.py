"""A package's names imported when first used (PEP 562): a report reader process importing one module
of ``xladdin`` or ``xladdin.tasks`` does not import every task, the batcher and pandas with it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose ``names`` (name → module, relative to it)
    are imported on first use and kept in its namespace."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return getattr_, dir_
