"""``xladdin`` entry point: parse arguments, call the library, turn its error
into one line and an exit code (0 ok, 1 some rows failed, 2 error; ``screen --compare`` / ``--replay``
add 4 when rows changed, as ``nightly`` does, ``diff`` exits as diff(1): 0 same, 1 changed)."""

from __future__ import annotations

import argparse
import os
import sys

from .. import collector
from ..errors import XladdinError
from . import cache_cmd, calc_cmd, cells_cmd, compare_cmd, diff_cmd, eval_cmd, highlights_cmd, nightly_cmd, screen_cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xladdin", description="A local Qwen model as a spreadsheet function.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    screen_cmd.add_parser(sub)
    nightly_cmd.add_parser(sub)
    highlights_cmd.add_parser(sub)
    cache_cmd.add_parser(sub)
    eval_cmd.add_parser(sub)
    calc_cmd.add_parser(sub)
    diff_cmd.add_parser(sub)
    compare_cmd.add_parser(sub)
    cells_cmd.add_parser(sub)
    return parser


def _version() -> str:
    from ..version import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # output the terminal's encoding cannot hold (a cp1252 console, a
        if hasattr(stream, "reconfigure"):  # redirect on Windows) is replaced, never a traceback at the end
            stream.reconfigure(errors="replace")
    args = build_parser().parse_args(argv)
    collector.for_many_requests()  # the process is the command's (``collector``)
    try:
        return args.func(args)
    except XladdinError as e:
        print(f"xladdin: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nxladdin: interrupted — finished rows are cached; run the same command again to continue",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        # The engine may still be computing abandoned requests in native threads that the
        # interpreter would join at exit; everything finished is already on disk.
        os._exit(130)


if __name__ == "__main__":
    sys.exit(main())
