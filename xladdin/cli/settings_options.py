"""Options shared by commands: they become ``Settings`` overrides."""

from __future__ import annotations

import argparse

from ..settings import Settings


def add_settings_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine and cache (also XLADDIN_* env vars)")
    g.add_argument("--model", help="GGUF path or hub id owner/repo/file.gguf for the embedded engine")
    g.add_argument("--engine-url", help="OpenAI-compatible server, e.g. http://gpu-box:8000/v1 (vLLM)")
    g.add_argument("--api-key", help="API key for the server")
    g.add_argument("--cache-dir", help="cache directory")
    g.add_argument("--no-cache", action="store_true", default=None, help="neither read nor write the cache")
    g.add_argument("--parallel", dest="max_parallel", type=int, help="requests in flight (engine slots)")
    g.add_argument("--timeout", type=float, help="seconds per engine request")
    g.add_argument("--verbose-engine", dest="engine_verbose", action="store_true", default=None,
                   help="show the embedded engine's logs")


def settings_from(args: argparse.Namespace) -> Settings:
    names = ("model", "engine_url", "api_key", "cache_dir", "no_cache", "max_parallel", "timeout", "engine_verbose",
             "undated_reports")
    return Settings.load({n: getattr(args, n, None) for n in names})
