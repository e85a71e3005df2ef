"""``xladdin-server``: serve a model for xladdin (vLLM on a GPU, or the CPU engine) and verify models."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from xladdin.errors import ConfigError, XladdinError
from xladdin.settings import Settings

from ..engine import profiles
from ..settings import loopback
from . import launcher, verify


def cmd_serve(args: argparse.Namespace) -> int:
    api_key = args.api_key or os.environ.get("XLADDIN_API_KEY")
    if not loopback(args.host) and not api_key:
        raise ConfigError(f"--host {args.host} exposes the server to the network: set --api-key or XLADDIN_API_KEY")
    if args.engine == "cpu":
        if args.gpus > 1:
            raise ConfigError("--gpus is for --engine vllm: the CPU engine uses no GPU")
        port = args.port or 8080
        cmd = launcher.cpu_server_command(args.model, host=args.host, port=port, parallel=args.parallel)
        env = launcher.key_env("XLADDIN_API_KEY", api_key)
        timeout = 300.0
    else:
        if args.profile == "auto":
            profile, why = profiles.auto_profile(profiles.gpu_memory_gib())
            print(f"profile: {profile.name} — {why}")
        else:
            profile = profiles.get_profile(args.profile)
        port = args.port or 8000
        cmd = profiles.vllm_command(profile, host=args.host, port=port,
                                    gpus=args.gpus if args.data_parallel else 1)
        env = launcher.key_env(profiles.API_KEY_ENV, api_key)
        extra = profiles.server_env(profile, batch_invariant=args.batch_invariant)
        if extra:
            env = {**(env or os.environ), **extra}
            print("environment: " + " ".join(f"{k}={v}" for k, v in extra.items()), flush=True)
        timeout = 1800.0
    url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{port}"
    specs = [launcher.ServerSpec(cmd, url, env)]
    if args.gpus > 1 and not args.data_parallel:
        specs = launcher.one_per_gpu(cmd, url, port, args.gpus, env)
    for i, spec in enumerate(specs):
        shown = " ".join(f"'{a}'" if any(ch in a for ch in ' {}"') else a for a in spec.cmd)
        print(f"command: {f'CUDA_VISIBLE_DEVICES={i} ' if len(specs) > 1 else ''}{shown}", flush=True)
    if api_key:
        print(f"api key: {launcher.masked(api_key)}, passed in the environment", flush=True)
    if args.dry_run:
        return 0

    def ready(urls: list[str]) -> None:
        joined = ",".join(f"{u}/v1" for u in urls)  # several: the client spreads rows over them
        print(f"ready: export XLADDIN_ENGINE_URL={joined}" + ("  (and XLADDIN_API_KEY)" if api_key else ""),
              flush=True)

    # SIGTERM (systemd, kill) and SIGHUP (a closing terminal) stop the servers as Ctrl-C does: no orphan
    # left listening
    stops = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {s: signal.signal(s, _interrupt) for s in stops}
    try:
        codes = launcher.run_servers(specs, timeout=timeout, api_key=api_key, echo=args.verbose, on_ready=ready)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print(f"stopped (exit code {', '.join(str(c) for c in codes)})")
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_verify(args: argparse.Namespace) -> int:
    def settings(url: str | None, model: str | None) -> Settings:
        return Settings.load({"engine_url": url, "model": model, "api_key": args.api_key, "timeout": args.timeout})

    first = settings(args.engine_url, args.model)
    against = settings(args.against_url, args.against_model) if (args.against_url or args.against_model) else None
    model_path = Path(args.model) if args.model and Path(args.model).exists() else None
    report = verify.verify(first, against=against, model_path=model_path,
                           manifest=Path(args.manifest) if args.manifest else None, rows=args.rows,
                           min_agreement=args.min_agreement)
    print(report.table())
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xladdin-server", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="start a model server (vLLM with a profile, or the CPU engine)")
    s.add_argument("--engine", choices=("vllm", "cpu"), default="vllm")
    s.add_argument("--profile", default="qwen3.5-9b-24gb",
                   help=f"vLLM profile: auto or one of {', '.join(profiles.load_profiles())}")
    s.add_argument("--model", help="--engine cpu: GGUF path or hub id (default: the starter model)")
    s.add_argument("--host", default="127.0.0.1", help="bind address (non-loopback requires an API key)")
    s.add_argument("--port", type=int, help="port (vLLM 8000, CPU 8080)")
    s.add_argument("--api-key", help="require this key (also XLADDIN_API_KEY)")
    s.add_argument("--parallel", type=int, default=4, help="--engine cpu: slots")
    s.add_argument("--gpus", type=int, default=1,
                   help="vLLM: one server per GPU on ports PORT…PORT+N-1; the client spreads rows over them")
    s.add_argument("--data-parallel", action="store_true",
                   help="with --gpus N: one server with vLLM's --data-parallel-size N instead (one URL; measured "
                        "slower for screening)")
    s.add_argument("--batch-invariant", action="store_true",
                   help="vLLM: the same answer whatever else is in the batch (VLLM_BATCH_INVARIANT=1, beta; slower): "
                        "with the cache, reruns reproduce")
    s.add_argument("--dry-run", action="store_true", help="print the command, start nothing")
    s.add_argument("--verbose", action="store_true", help="show the server's output")
    s.set_defaults(func=cmd_serve)
    v = sub.add_parser("verify", help="hash, smoke and agreement checks of a model")
    v.add_argument("--model", help="GGUF path (embedded engine) — also what --manifest hashes")
    v.add_argument("--engine-url", help="or an OpenAI-compatible server to check")
    v.add_argument("--against-model", help="second engine for the agreement check: a GGUF path")
    v.add_argument("--against-url", help="second engine for the agreement check: a server URL")
    v.add_argument("--manifest", help="sha256 manifest (sha256sum format or JSON) of the model files")
    v.add_argument("--api-key")
    v.add_argument("--rows", type=int, default=8, help="sample rows to screen")
    v.add_argument("--min-agreement", type=float, default=0.9)
    v.add_argument("--timeout", type=float, default=120)
    v.set_defaults(func=cmd_verify)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except XladdinError as e:
        print(f"xladdin-server: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
