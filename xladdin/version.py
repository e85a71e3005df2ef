"""The version of xladdin (the one place it is written: the package metadata reads it from here)."""

import functools
import hashlib
from pathlib import Path

__version__ = "0.1.0"


@functools.cache
def source_digest() -> str:
    """A digest of the package's own source, read once: what is kept on disk as made by this code (a report
    row's result kept by its input, ``core.resolver``) is used only by the same code. Empty when the source
    cannot be read (nothing is kept then)."""
    digest = hashlib.sha256(__version__.encode())
    package = Path(__file__).parent
    try:
        for module in sorted(package.rglob("*.py")):
            digest.update(module.relative_to(package).as_posix().encode())
            digest.update(module.read_bytes())
    except OSError:
        return ""
    return digest.hexdigest()[:16]
