"""``xladdin cache stats|clear``"""

from __future__ import annotations

import argparse
import json

from ..cache import Cache
from ..settings import Settings


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="show or clear the answer cache")
    p.add_argument("action", choices=("stats", "clear"))
    p.add_argument("--cache-dir", help="cache directory")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = Settings.load({"cache_dir": args.cache_dir})
    cache = Cache(settings.cache_dir)
    try:
        if args.action == "clear":
            print(f"removed {cache.clear()} entries from {settings.cache_dir}")
        else:
            stats = cache.stats()
            print(json.dumps({k: stats[k] for k in ("directory", "enabled", "entries", "bytes")}, indent=2))
    finally:
        cache.close()
    return 0
