"""``xladdin screen POOL -o REPORT``"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError, first_error
from ..jobs.changes import read_saved
from ..jobs.pool_screen import RunSummary, screen_file
from ..jobs.replay import differences, recorded, recorded_rules, replay_settings
from ..settings import toml_text
from ..tasks.rules import DEFAULT_RULES, Rules
from .settings_options import add_settings_options, settings_from

CHANGED = 4  # added to the exit status when --compare found rows that changed, or --replay differences


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("screen", help="screen a stock pool (CSV/XLSX) into an annotated report")
    p.add_argument("input", nargs="?",
                   help="pool file: .csv or text export, .xlsx or .xls (代码/名称/行业/市盈率TTM/ROE/财报摘要 …)")
    p.add_argument("-o", "--output", help="report .xlsx (default), .csv or .json [default: INPUT_report.xlsx]")
    p.add_argument("--rules", help="TOML file overriding rule thresholds (see xladdin.tasks.rules.Rules)")
    p.add_argument("--reports", metavar="DIR", help="folder of report files (.pdf .txt .md .html) named with the "
                   "stock code (603339_年报.pdf), read for the rows without a 报告文件 column")
    p.add_argument("--compare", metavar="REPORT", help="an earlier report (last night's .xlsx/.csv/.json): the rows "
                   "whose level, score or flags changed, new 高 first, and rows in or out, on a Changes sheet; "
                   "exit status 4 is added when any changed")
    p.add_argument("--as-of", metavar="DATE", help="screen as of this day (2021-03-31): a report published after it "
                   "is not used (a row whose 公告日期 is after it is refused), --reports gives each code the newest "
                   "published by then; a report whose publication day is not known is not used")
    p.add_argument("--undated-reports", action="store_true", default=None,
                   help="with --as-of, use a report whose publication day is not known (its row flagged 公告日未知)")
    p.add_argument("--replay", metavar="REPORT", help="screen again from the run recorded in REPORT (its input, "
                   "rules, as-of date, sampling; the engine configured now) into -o [REPORT.replay.xlsx] and list "
                   "what differs; exit status plus 4 when anything does")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_ray_options(p)
    add_settings_options(p)
    p.set_defaults(func=run)


def add_ray_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Ray (pip install 'xladdin[ray]')")
    g.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run the job as a Ray Data pipeline: report files read by Ray tasks, rows answered by "
                   "actors asking the servers of --engine-url; ADDRESS: a cluster (auto, ray://head:10001), "
                   "default a Ray instance of this machine for the job")
    g.add_argument("--ray-cpus", type=int, metavar="N", help="CPUs of the local Ray instance [default: all]")
    g.add_argument("--ray-actors", type=int, default=1, metavar="N",
                   help="Ray actors asking the servers [default: 1]")
    g.add_argument("--ray-engine", choices=("http", "vllm", "llm-http"), default="http",
                   help="http: actors asking the OpenAI-compatible servers of --engine-url (default); vllm: "
                   "ray.data.llm's vLLM processor, vLLM engines on the Ray nodes' GPUs (needs vLLM there); "
                   "llm-http: ray.data.llm's HTTP processor against the first server of --engine-url")
    g.add_argument("--ray-profile", default="qwen3-8b-h200", metavar="NAME",
                   help="--ray-engine vllm: the vLLM profile whose engine settings it runs (xladdin-server "
                   "profiles) [default: qwen3-8b-h200]")
    g.add_argument("--ray-model", metavar="SOURCE",
                   help="--ray-engine vllm: the model, a folder or a hub id [default: the profile's]")
    g.add_argument("--ray-engine-kwargs", type=_json_object, default={}, metavar="JSON",
                   help='--ray-engine vllm: vLLM engine arguments over the profile\'s, e.g. \'{"max_num_seqs": 512}\'')
    g.add_argument("--ray-replicas", type=int, default=1, metavar="N",
                   help="--ray-engine vllm: vLLM engines, one GPU each; llm-http: processor actors [default: 1]")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("a JSON object of vLLM engine arguments")
    return value


def ray_options(args: argparse.Namespace) -> Any:
    from ..jobs.ray_job import RayOptions

    return RayOptions(address=args.ray, cpus=args.ray_cpus, engine=args.ray_engine, actors=args.ray_actors,
                      profile=args.ray_profile, model=args.ray_model, engine_kwargs=args.ray_engine_kwargs,
                      replicas=args.ray_replicas)


def load_rules(path: str | None) -> Rules:
    if not path:
        return DEFAULT_RULES
    try:
        return Rules.model_validate(tomllib.loads(toml_text(Path(path), "rules file")))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"rules file {path}: {e}") from None
    except ValidationError as e:
        raise ConfigError(f"rules file {path}: {first_error(e)}") from None


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    if args.ray and not args.input and Path(args.ray).is_file():  # `screen --ray POOL`: the pool, run locally
        args.input, args.ray = args.ray, "local"
    if args.replay:
        if args.ray:
            raise ConfigError("--replay runs on this machine: leave out --ray")
        return replay(args, t0)
    if not args.input:
        raise ConfigError("name the pool file to screen (or --replay REPORT)")
    settings = settings_from(args)
    output = args.output or str(Path(args.input).with_name(Path(args.input).stem + "_report.xlsx"))
    if args.ray:
        from ..jobs.ray_job import screen_ray

        summary = screen_ray(args.input, output, settings, ray_options(args), rules=load_rules(args.rules),
                             progress=not args.no_progress, reports=args.reports, compare=args.compare,
                             as_of=args.as_of)
    else:
        summary = screen_file(args.input, output, settings, rules=load_rules(args.rules),
                              progress=not args.no_progress, reports=args.reports, compare=args.compare,
                              as_of=args.as_of)
    if summary.note:
        print(f"note: {summary.note}", file=sys.stderr)
    if summary.unrecognised:
        print("columns not recognised (copied to the report as they are): " + ", ".join(
            " ".join(c.split()) for c in summary.unrecognised), file=sys.stderr)
    for line in summary.passed_over or ():
        print(f"not a row: {line}", file=sys.stderr)
    print(summary_line(summary, time.perf_counter() - t0, "flag 模型未作答"))
    if summary.changes is not None:
        print(summary.changes.line())
    return exit_status(summary)


def replay(args: argparse.Namespace, t0: float) -> int:
    """``--replay REPORT``: the recorded run again, and what differs."""
    saved = recorded(args.replay)
    run = saved.run
    given = Path(args.replay)
    output = args.output or str(given.with_name(given.stem + ".replay" + given.suffix))
    rules = load_rules(args.rules) if args.rules else recorded_rules(saved)
    overrides = {n: getattr(args, n, None) for n in ("model", "engine_url", "api_key", "cache_dir", "no_cache",
                                                      "max_parallel", "timeout", "engine_verbose")}
    summary = screen_file(run["input_path"], output, replay_settings(saved, overrides), rules=rules,
                          progress=not args.no_progress, reports=run.get("reports_dir"), as_of=run.get("as_of"))
    found, text = differences(saved, read_saved(summary.output))
    for line in found:
        print(f"differs: {line}")
    for line in text:
        print(f"text differs: {line}")
    print(summary_line(summary, time.perf_counter() - t0, "flag 模型未作答"))
    worded = f"; {len(text)} in the model's words only (理由, 说明, 出处: not a verdict)" if text else ""
    print(f"replay of {given.name}: {len(found)} differences" + (" (none: the run reproduces)" if not found else "")
          + worded)
    return (1 if summary.errors else 0) | (CHANGED if found else 0)


def exit_status(summary: RunSummary) -> int:
    """0 every row screened, 1 some rows failed; plus 4 when rows changed since the report compared with."""
    return (1 if summary.errors else 0) | (CHANGED if summary.changes else 0)


def summary_line(summary: RunSummary, seconds: float, alone: str) -> str:
    """The run summed up: rows, how many the model answered (from the cache too), those code answered
    alone, errors, and the command's own wall time."""
    without = f"{summary.without_answer} without a model answer ({alone}), " if summary.without_answer else ""
    rate = f" ({summary.rows / seconds:.2f} rows/s)" if seconds > 0 else ""
    return (f"{summary.rows} rows, {summary.cache_hits} from cache, {summary.errors} errors, {without}"
            f"the model answered {summary.answered} of {summary.rows}, {seconds:.1f}s{rate} → {summary.output}")
