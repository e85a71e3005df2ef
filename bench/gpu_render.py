"""The GPU section of docs/BENCHMARKS.md, from ``bench/results/gpu.json`` (``python -m bench gpu``).

The file holds the runs, oldest first, each as ``bench gpu`` wrote it: its date (``when``), the server's
facts and the parts it ran (``per_cell``, ``default_run``, ``sweep``, ``bare_runs``, ``market``,
``excel_vs_cli``, ``documents``, ``files``, ``ray_files``) with the headline numbers (``summarise``). A run
whose page was written before this layout keeps that page as it was (``doc``) beside its numbers
(``data``). The section shows the runs newest first."""

from __future__ import annotations

from typing import Any

EVERY_RUN = True  # the section shows each run (not the newest alone)


def render(d: dict[str, Any]) -> list[str]:
    """Section 6: every run, newest first."""
    lines = ["## 6. GPU serving (`python -m bench gpu`)", ""]
    for run in reversed(d.get("runs", [])):
        lines += run["doc"] if "doc" in run else render_run(run)
    return lines


def render_run(r: dict[str, Any]) -> list[str]:
    """One run as ``bench gpu`` writes it: the parts it ran."""
    lines = [f"### {r.get('when', 'date not recorded')}: {r.get('gpu')}, vLLM {r.get('vllm')}", "",
             f"Model `{r.get('model')}` (served as `{r.get('served_model')}`), task `{r.get('task_version')}`. "
             f"Server: `{r.get('server_flags', '')}`. Rows/s of the screen task; each part asks rows no other "
             "part asked.", ""]
    if r.get("note"):  # how this run was made, where the parts' numbers do not say
        lines += [f"{r['note']}.", ""]
    table = []
    if "per_cell" in r:
        table.append(f"| per cell: one request at a time | {r['per_cell']['rows']} | {r['per_cell']['rows_per_s']} "
                     f"| {r['per_cell'].get('errors', 0)} | |")
    if "default_run" in r:
        d = r["default_run"]
        table.append(f"| **batcher, default settings** (window ended at {d.get('final_window')}) | {d['rows']} | "
                     f"**{d['rows_per_s']}** | {d['errors']} | {_step(d)} |")
    table += [f"| batcher, fixed {s['max_parallel']} in flight | {s['rows']} | {s['rows_per_s']} | {s['errors']} "
              f"| {_step(s)} |" for s in r.get("sweep", [])]
    table += [f"| bare AsyncOpenAI, {b['concurrency']} in flight | {b['rows']} | {b['rows_per_s']} | {b['errors']} | |"
              for b in r.get("bare_runs", [])]
    if table:
        lines += ["| run | rows | rows/s | errors | server ms per step |", "|---|---|---|---|---|", *table, ""]
    for name, label in (("market", "Whole pool (the CLI path)"), ("documents", "Document-sized texts in a CSV field"),
                        ("files", "A report file per row (`xladdin screen --reports`)"),
                        ("excel_vs_cli", "The Excel path against the CLI"),
                        ("ray_files", "The report-file job on Ray Data")):
        if name in r:
            lines.append(f"- {label}: {_facts(r[name])}.")
    headline = {k: r[k] for k in ("batched_over_per_cell", "default_over_best_bare", "default_over_best_sweep")
                if k in r}
    if headline:
        lines.append("- " + "; ".join(f"{k.replace('_', ' ')}: **{v}**" for k, v in headline.items()) + ".")
    return [*lines, ""]


def _facts(part: dict[str, Any]) -> str:
    """A part's numbers, as recorded (nested records left to the results file)."""
    shown = [f"{k.replace('_', ' ')} {v}" for k, v in part.items() if not isinstance(v, dict | list)]
    server = part.get("server")
    if isinstance(server, dict) and server:
        shown.append(f"server: {server.get('engine_steps')} engine steps of {server.get('ms_per_step')} ms")
    return ", ".join(shown)


def _step(run: dict[str, Any]) -> str:
    server = run.get("server") or {}
    return str(server.get("ms_per_step", ""))
