"""``xladdin cache stats|clear``"""

from __future__ import annotations

import argparse
import json
import sys

from ..core import Cache, remove_cache_files
from ..settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="show or clear the answer cache")
    p.add_argument("action", choices=("stats", "clear"))
    p.add_argument("--cache-dir", help="cache directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.load({"cache_dir": args.cache_dir})
    cache = Cache(settings.cache_dir, read_only=args.action == "stats")
    try:
        if cache.refused is not None:
            print(f"xladdin: error: {cache.refused}", file=sys.stderr)
            return 2
        if args.action == "clear" and cache.enabled and not cache.writable:
            print(f"xladdin: error: {settings.cache_dir} is read only for this user (its owner may clear it): "
                  "nothing removed", file=sys.stderr)
            return 2
        if args.action == "clear" and not cache.enabled and settings.cache_dir.is_dir():
            # unreadable (a damaged database): its own files removed and the cache made anew; whatever
            # else the folder holds stays as it is
            why = cache.warning or "damaged"
            cache.close()
            try:
                removed, left = remove_cache_files(settings.cache_dir)
            except OSError as e:
                print(f"xladdin: error: cannot remove the unreadable cache's files in {settings.cache_dir}: {e}")
                return 2
            cache = Cache(settings.cache_dir)
            state = "a working, empty cache" if cache.enabled else f"still unusable: {cache.warning}"
            print(f"the cache could not be read ({why}); removed its {len(removed)} files ({_listed(removed)}) "
                  f"and made a new one: {state}")
            print(f"left as they were: {_listed(left)}" if left else "nothing else was in the folder")
        elif args.action == "clear":
            print(f"removed {cache.clear()} entries from {settings.cache_dir} (the cache's own files only)")
        else:
            stats = cache.stats()
            print(json.dumps({k: stats[k] for k in ("directory", "enabled", "entries", "bytes")}, indent=2))
    finally:
        cache.close()
    return 0


def _listed(names: list[str], most: int = 8) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
