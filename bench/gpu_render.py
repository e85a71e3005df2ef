"""The GPU section of docs/BENCHMARKS.md, from ``bench/results/gpu.json`` (``python -m bench gpu``)."""

from __future__ import annotations

from typing import Any


def render(d: dict[str, Any]) -> list[str]:
    """The GPU section of docs/BENCHMARKS.md."""
    lines = [
        "## 6. GPU serving (`python -m bench gpu`)",
        "",
        f"One run against {d.get('gpu')}, vLLM {d.get('vllm')}, model `{d.get('model')}` (served as "
        f"`{d.get('served_model')}`). Server: `{d.get('server_flags', '')}`. Rows/s of the screen task, 0 errors "
        "unless stated; each part asks rows no other part asked.",
        "",
        "| run | rows | rows/s |",
        "|---|---|---|",
        f"| per cell: one request at a time | {d['per_cell']['rows']} | {d['per_cell']['rows_per_s']} |",
        f"| **batcher, default settings** (adaptive window, ended at {d['default_run']['final_window']}) | "
        f"{d['default_run']['rows']} | **{d['default_run']['rows_per_s']}** |",
    ]
    lines += [f"| batcher, fixed {s['max_parallel']} in flight | {s['rows']} | {s['rows_per_s']} |" for s in d["sweep"]]
    lines += [f"| bare AsyncOpenAI, {b['concurrency']} in flight | {b['rows']} | {b['rows_per_s']} |"
              for b in d["bare_runs"]]  # fmt: skip
    m = d["market"]
    lines += [
        "",
        f"- default ÷ per cell: **{d['batched_over_per_cell']}×**; default ÷ best bare client: "
        f"**{d['default_over_best_bare']}**; default ÷ best fixed setting: {d.get('default_over_best_sweep')}.",
        f"- Whole pool ({m['rows']} rows through the CLI path): **{m['seconds']} s** cold ({m['rows_per_s']} rows/s, "
        f"{m['errors']} errors); again from the cache {m['rerun_seconds']} s.",
    ]
    if "two_gpus" in d:
        t = d["two_gpus"]
        one, two = t["one_gpu_market"]["seconds"], t["data_parallel_2_market"]["seconds"]
        lines.append(f"- Two GPUs ({t['machine']}): one GPU {one} s, vLLM `--data-parallel-size 2` {two} s for the "
                     "same pool.")  # fmt: skip
    if "after_quotes" in d:
        a = d["after_quotes"]
        lines.append(f"- Measured with {d.get('task_version', 'the task version of the time')}. {a['when']}: "
                     f"{a['note']}:")  # fmt: skip
        for r in a["runs"]:
            took = f"{r['market_seconds']} s" if r["market_seconds"] else f"not finished within {r['given_s']} s"
            lines.append(f"  - {r['task']}, {r['server']}: {took} ({r['log']})")
    if "screen_6" in d:
        lines += _render_later(d["screen_6"])
    lines.append("")
    return lines


def _render_later(a: dict[str, Any]) -> list[str]:
    """A later session's runs: the whole pool per server setting, with the tokens each answer took."""
    lines = ["", f"### {a['task_version']} ({a['when']})", "", f"Server: `{a['server_flags']}`. {a['note']}.", "",
             "| server | whole pool (5,400 rows) | rows/s | generated tokens per row | errors |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in a["runs"]:
        m = r["market"]
        took = f"**{m['seconds']} s**" if m.get("seconds") else f"not finished within {m['given_s']} s"
        lines.append(f"| {r['server']} | {took} | {m.get('rows_per_s', '')} | {m.get('completion_tokens_per_row', '')} "
                     f"| {m.get('errors', '')} |")  # fmt: skip
    first = a["runs"][0]
    if "per_cell" in first:
        cell, default = first["per_cell"], first["default_run"]
        bare = [b for b in first.get("bare_runs", []) if b.get("rows_per_s")]
        lines += ["", f"Same server as the first row: per cell {cell['rows_per_s']} rows/s; batcher at default "
                  f"settings {default['rows_per_s']} rows/s ({default['rows']} rows, window ended at "
                  f"{default['final_window']}, {default['completion_tokens_per_row']} tokens per row) = "
                  f"**{round(default['rows_per_s'] / cell['rows_per_s'], 1)}× per cell**"]  # fmt: skip
        if bare:
            best = max(b["rows_per_s"] for b in bare)
            lines[-1] += (f"; bare AsyncOpenAI at {', '.join(str(b['concurrency']) for b in bare)} in flight "
                          f"{best} rows/s (default ÷ bare {round(default['rows_per_s'] / best, 2)})")
        lines[-1] += "."
        if first.get("sweep"):
            sweep = ", ".join(f"{s['max_parallel']} → {s['rows_per_s']}" for s in first["sweep"])
            lines.append(f"Fixed windows (rows/s): {sweep} ({first['sweep_note']}).")
        if "market_again" in first:
            again = first["market_again"]
            lines.append(f"The whole pool again on that server later: {again['seconds']} s, {again['errors']} errors "
                         f"({again['note']}): runs of one setting vary by that much.")  # fmt: skip
    return lines
