"""The GPU section of docs/BENCHMARKS.md, from ``bench/results/gpu.json`` (``python -m bench gpu``)."""

from __future__ import annotations

from typing import Any


def render(d: dict[str, Any]) -> list[str]:
    """The GPU section of docs/BENCHMARKS.md: the latest run, then the earlier ones."""
    lines = [
        "## 6. GPU serving (`python -m bench gpu`)",
        "",
        f"One run ({d.get('when', 'date not recorded')}) against {d.get('gpu')}, vLLM {d.get('vllm')}, model "
        f"`{d.get('model')}` (served as `{d.get('served_model')}`), task `{d.get('task_version')}`. Server: "
        f"`{d.get('server_flags', '')}`. Rows/s of the screen task, 0 errors unless stated; each part asks rows no "
        "other part asked.",
        "",
        "| run | rows | rows/s | server ms per step |",
        "|---|---|---|---|",
        f"| per cell: one request at a time | {d['per_cell']['rows']} | {d['per_cell']['rows_per_s']} | |",
        f"| **batcher, default settings** (adaptive window, ended at {d['default_run']['final_window']}) | "
        f"{d['default_run']['rows']} | **{d['default_run']['rows_per_s']}** | {_step(d['default_run'])} |",
    ]
    lines += [f"| batcher, fixed {s['max_parallel']} in flight | {s['rows']} | {s['rows_per_s']} | {_step(s)} |"
              for s in d["sweep"]]
    lines += [f"| bare AsyncOpenAI (one client, the SDK's own connection pool), {b['concurrency']} in flight | "
              f"{b['rows']} | {b['rows_per_s']} | |" for b in d["bare_runs"]]
    m = d["market"]
    lines += [
        "",
        f"- best batched run ÷ per cell: **{d['batched_over_per_cell']}×**; default ÷ best bare client: "
        f"**{d['default_over_best_bare']}**; default ÷ best fixed setting: {d.get('default_over_best_sweep')}.",
        f"- Whole pool ({m['rows']} rows through the CLI path): **{m['seconds']} s** cold ({m['rows_per_s']} rows/s, "
        f"{m['errors']} errors){_server(m)}; again from the cache {m['rerun_seconds']} s.",
    ]
    if "market_again" in d:
        a = d["market_again"]
        lines.append(f"- The whole pool again ({a['note']}): **{a['seconds']} s**, {a['errors']} errors{_server(a)}.")
    if "market_prepared_requests" in d:
        a = d["market_prepared_requests"]
        lines.append(f"- The whole pool with {a['note']} ({a['when']}): **{a['seconds']} s**, {a['errors']} errors"
                     f"{_server(a)}.")
    if "market_plain_body" in d:
        a = d["market_plain_body"]
        lines.append(f"- The whole pool with {a['note']}: **{a['seconds']} s**, {a['errors']} errors{_server(a)}.")
    if "before" in d:
        b = d["before"]
        lines.append(f"- Before ({b['when']}; {b['note']}): whole pool {b['market']['seconds']} s{_server(b['market'])}"
                     f"; batcher at default settings {b['default_run']['rows_per_s']} rows/s.")
    if "short_pool_trials" in d:
        lines += _render_trials(d["short_pool_trials"])
    for name in ("short_pool_session", "batch_invariant_session"):  # their text as written with the runs
        if "doc" in d.get(name, {}):
            lines += ["", *d[name]["doc"]]
    if "report_files_session" in d:
        lines += _render_report_files(d["report_files_session"])
    if "report_files_notes_unread" in d:
        lines += _render_notes_unread(d["report_files_notes_unread"], d.get("report_files_session"))
    if "documents_client_halved" in d:
        lines += _render_documents_again(d["documents_client_halved"])
    if "documents_session" in d:
        lines += _render_documents(d["documents_session"])
    if "two_gpus_screen_7" in d:
        lines += _render_two_gpus(d["two_gpus_screen_7"])
    if "screen_6" in d:
        lines += _render_later(d["screen_6"])
    if "screen_2" in d:
        lines += _render_screen_2(d["screen_2"], d)
    lines.append("")
    return lines


def _render_trials(s: dict[str, Any]) -> list[str]:
    """The server settings tried on the short pool, one fresh server each unless said."""
    lines = ["", f"### The short pool: server settings tried ({s['when']}, {s['gpu']}, vLLM {s['vllm']}, "
             f"`{s['task_version']}`)", "",
             f"The 5,400-row short pool ({s['pool']}); goal ≤ {s['goal_seconds']} s on a fresh server. {s['note']} "
             "(`bench/results/gpu.json`, `short_pool_trials`).", "",
             "| server; pool | seconds | client CPU share | front-end steps × ms | generated tokens/s "
             "| mean ms between tokens | running (steady median) | GPU busy % (median) "
             "| engine loop busy |", "|---|---|---|---|---|---|---|---|---|"]
    for r in s["runs"]:
        srv, prof = r["server"], r.get("profile") or {}
        gpu = (prof.get("gpu_utilisation_pct") or {}).get("median", "")
        lines.append(f"| {r['arm']}; {r['when']} | **{r['seconds']}** | {r['client_cpu_share']} | "
                     f"{srv['engine_steps']} × {srv['ms_per_step']} | {srv['generated_tokens_per_s']} | "
                     f"{srv['mean_inter_token_ms']} | {r['running_requests']['steady_median']} | {gpu} "
                     f"| {prof.get('engine_main_thread_busy', '')} |")
    lines += ["", *(f"- {f}" for f in s.get("findings", []))]
    return lines


def _render_documents(s: dict[str, Any]) -> list[str]:
    """Whole pools of document-sized texts (``bench gpu`` part documents)."""
    lines = ["", f"### Document-sized texts ({s['when']}, {s['gpu']}, vLLM {s['vllm']}, `{s['task_version']}`)", "",
             f"{s['note'][0].upper()}{s['note'][1:]}. Server: `{s['server_flags']}`.", "",
             "| pool | text limit (chars) | prompt tokens per row | seconds | rows/s | errors | prefix-cache hits "
             "| engine steps × ms | client CPU share | again from the cache |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    runs = (("market (short texts)", s["market"]), ("documents, text_tokens 1500 (default)",
            s["documents_text_tokens_1500"]), ("documents, text_tokens 1000", s["documents_text_tokens_1000"]))
    for label, r in runs:
        srv = r.get("server") or {}
        per_row = r.get("prompt_tokens_per_row") or round(srv.get("prompt_tokens", 0) / max(1, r["rows"]))
        lines.append(f"| {label} | {r.get('text_chars_per_row')} | {per_row:,} | **{r['seconds']}** "
                     f"| {r['rows_per_s']} | {r['errors']} | {srv.get('prefix_cache_hit_rate')} "
                     f"| {srv.get('engine_steps')} × {srv.get('ms_per_step')} | {r.get('client_cpu_share')} "
                     f"| {r['rerun_seconds']} s |")
    return lines


def _render_report_files(s: dict[str, Any]) -> list[str]:
    """The market pool's rows each naming its own report file (``bench gpu`` part files) beside the same rows
    with document-sized texts in a CSV field (part documents), on one server, one after the other."""
    lines = ["", f"### Report files ({s['when']}, {s['gpu']}, vLLM {s['vllm']}, `{s['task_version']}`)", "",
             f"{s['note'][0].upper()}{s['note'][1:]}. Server: `{s['server_flags']}`.", "",
             "| pool | rows | seconds | rows/s | errors | files read | prompt tokens per row | prefix-cache hits "
             "| running requests (steady median) | machine CPU busy | client peak RSS (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    runs = [("documents (texts in a CSV field)", s["documents"])]
    runs += [(f"report files, {r['readers']} readers", r) for r in s["files_runs"]]
    for label, r in runs:
        srv, run = r.get("server") or {}, r.get("running_requests") or {}
        rss = r.get("client_peak_rss_mib", "")
        lines.append(f"| {label} | {r['rows']} | **{r['seconds']}** | {r['rows_per_s']} | {r['errors']} "
                     f"| {r.get('files_read', '')} | {r.get('prompt_tokens_per_row') or ''} "
                     f"| {srv.get('prefix_cache_hit_rate', '')} | {run.get('steady_median', '')} "
                     f"| {run.get('steady_machine_cpu_busy', '')} | {rss} |")
    first = s["files_runs"][0]
    lines += ["", f"Report files ÷ documents: **{first['over_documents']}** (goal ≤ 1.15); the whole pool from report "
              f"files in {first['seconds']} s (goal ≤ 300 s), the client's peak RSS {first['client_peak_rss_mib']} MiB "
              "(goal ≤ 2,048; its reader processes apart)."]
    for r in s["files_runs"]:
        if r.get("note"):
            lines += ["", f"Report files, {r['readers']} readers: {r['note']}."]
    return lines


def _render_notes_unread(s: dict[str, Any], before: dict[str, Any] | None) -> list[str]:
    """The report-file pool again once the readers leave out the notes to the statements."""
    r, srv, run = s["files"], s["files"].get("server") or {}, s["files"].get("running_requests") or {}
    tokens = round(srv.get("generated_tokens", 0) / r["rows"], 1)
    documents = f", {before['documents']['seconds']} s" if before else ""
    lines = ["", f"### Report files, the notes not read ({s['when']}, {s['gpu']}, vLLM {s['vllm']}, "
             f"`{s['task_version']}`)", "", f"{s['note'][0].upper()}{s['note'][1:]}.", "",
             "| rows | seconds | rows/s | errors | files read | readers | prompt tokens per row "
             "| running requests (steady median) | machine CPU busy | client peak RSS (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|",
             f"| {r['rows']} | **{r['seconds']}** | {r['rows_per_s']} | {r['errors']} | {r['files_read']} "
             f"| {r['readers']} | {r['prompt_tokens_per_row']} | {run.get('steady_median')} "
             f"| {run.get('steady_machine_cpu_busy')} | {r['client_peak_rss_mib']} |", "",
             f"The whole pool from report files in **{r['seconds']} s** (goal ≤ 300 s), "
             f"**{s['files_over_documents_session']}** of the document pool's time (goal ≤ 1.15; that run on another "
             f"fresh server{documents}), {s['files_over_files_before']} of the same pool before the notes were left "
             f"out; {tokens} generated tokens per row."]
    return lines


def _render_documents_again(s: dict[str, Any]) -> list[str]:
    """The document pool again after a client change, one fresh server per run."""
    lines = ["", f"### Document-sized texts again ({s['when']}, {s['gpu']}, vLLM {s['vllm']}, `{s['task_version']}`)",
             "", f"{s['note'][0].upper()}{s['note'][1:]}.", "",
             "| server flags (beyond the recipe) | prompt tokens per row | seconds | rows/s | errors "
             "| engine steps × ms | mean queue s | client CPU share | again from the cache |",
             "|---|---|---|---|---|---|---|---|---|"]
    for run in s["runs"]:
        r, srv = run["documents"], run["documents"].get("server") or {}
        extra = run["server_flags"].split("--compilation-config")[-1].split("}", 1)[-1].strip() or "none"
        lines.append(f"| `{extra}` | {r['prompt_tokens_per_row']:,} | **{r['seconds']}** | {r['rows_per_s']} "
                     f"| {r['errors']} | {srv.get('engine_steps')} × {srv.get('ms_per_step')} "
                     f"| {srv.get('mean_queue_s')} | {r.get('client_cpu_share')} | {r['rerun_seconds']} s |")
    return lines


def _step(run: dict[str, Any]) -> str:
    server = run.get("server") or {}
    return str(server.get("ms_per_step", ""))


def _server(run: dict[str, Any]) -> str:
    """What the server and the client did during a run, where it was recorded."""
    s = run.get("server")
    if not s:
        return ""
    return (f"; server: {s['engine_steps']} engine steps of {s['ms_per_step']} ms, {s['generated_tokens_per_s']:g} "
            f"generated tokens/s, prefix-cache hits {s['prefix_cache_hit_rate']}; client CPU share "
            f"{run.get('client_cpu_share')}")


def _render_two_gpus(t: dict[str, Any]) -> list[str]:
    """One server per GPU against one, on one 2-GPU box, one after the other."""
    lines = ["", f"### Two GPUs, {t['task_version']} ({t['when']})", "",
             "Same flags, one vLLM server per GPU; ms per step is each server's.", "",
             "| servers | whole pool (5,400 rows) | rows/s | errors | server ms per step | tokens per step | "
             "client CPU share |", "|---|---|---|---|---|---|---|"]
    for r in t["runs"]:
        m, s = r["market"], r["market"].get("server") or {}
        lines.append(f"| {r['server']} | **{m['seconds']} s** | {m['rows_per_s']} | {m['errors']} | "
                     f"{s.get('ms_per_step', '')} | {s.get('tokens_per_step', '')} | {m.get('client_cpu_share')} |")
    lines += ["", "With the servers this fast, two GPUs finish the pool no sooner than one: their steps are short and "
              "small (the engines wait), and the one client process is what is left. The first pool after a "
              "server starts is slower (49.4 s here and on the one-GPU box) than later ones (36.7-39.1 s); the "
              "cause is not measured (the pool needs 5 distinct schemas; each compiles in 0.4-0.8 s on 2 CPUs, "
              "section 9)."]
    return lines


def _render_screen_2(h: dict[str, Any], d: dict[str, Any]) -> list[str]:
    """The first full run (screen-2) and what followed it until screen-6."""
    lines = ["", f"### {h['task_version']} ({h['when']})", "",
             f"Server: `{h['server_flags']}`. Per cell {h['per_cell_rows_per_s']} rows/s; batcher at default settings "
             f"{h['default_rows_per_s']} rows/s ({h['batched_over_per_cell']}× per cell, "
             f"{h['default_over_best_bare']} of the best bare client); fixed windows (rows/s): "
             + ", ".join(f"{s['max_parallel']} → {s['rows_per_s']}" for s in h["sweep"])
             + f". Whole pool: {h['market']['seconds']} s, {h['market']['errors']} errors."]
    if "two_gpus" in d:
        t = d["two_gpus"]
        one, two = t["one_gpu_market"]["seconds"], t["data_parallel_2_market"]["seconds"]
        lines.append(f"- Two GPUs ({t['machine']}): one GPU {one} s, vLLM `--data-parallel-size 2` {two} s for the "
                     "same pool.")
    if "after_quotes" in d:
        a = d["after_quotes"]
        lines.append(f"- {a['when']}: {a['note']}:")
        for r in a["runs"]:
            took = f"{r['market_seconds']} s" if r["market_seconds"] else f"not finished within {r['given_s']} s"
            lines.append(f"  - {r['task']}, {r['server']}: {took} ({r['log']})")
    return lines


def _render_later(a: dict[str, Any]) -> list[str]:
    """A later session's runs: the whole pool per server setting, with the tokens each answer took."""
    lines = ["", f"### {a['task_version']} ({a['when']})", "", f"Server: `{a['server_flags']}`. {a['note']}.", "",
             "| server | whole pool (5,400 rows) | rows/s | generated tokens per row | errors |",
             "|---|---|---|---|---|"]
    for r in a["runs"]:
        m = r["market"]
        took = f"**{m['seconds']} s**" if m.get("seconds") else f"not finished within {m['given_s']} s"
        lines.append(f"| {r['server']} | {took} | {m.get('rows_per_s', '')} | {m.get('completion_tokens_per_row', '')} "
                     f"| {m.get('errors', '')} |")
    first = a["runs"][0]
    if "per_cell" in first:
        cell, default = first["per_cell"], first["default_run"]
        bare = [b for b in first.get("bare_runs", []) if b.get("rows_per_s")]
        lines += ["", f"Same server as the first row: per cell {cell['rows_per_s']} rows/s; batcher at default "
                  f"settings {default['rows_per_s']} rows/s ({default['rows']} rows, window ended at "
                  f"{default['final_window']}, {default['completion_tokens_per_row']} tokens per row) = "
                  f"**{round(default['rows_per_s'] / cell['rows_per_s'], 1)}× per cell**"]
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
                         f"({again['note']}): runs of one setting vary by that much.")
    return lines
