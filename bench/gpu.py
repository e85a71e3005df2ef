"""``python -m bench gpu --engine-url URL``: the real serving path against one OpenAI-compatible
server (vLLM on a GPU; the CPU server in CI), every alternative side by side in one run:

- per cell: one request at a time, as a naive UDF would ask;
- the batcher at its default settings (the window adapts to the server, ``xladdin.core.batcher.Window``);
- the batcher at a sweep of fixed in-flight limits;
- a bare ``AsyncOpenAI`` client with the same requests, as many at once as the server runs (the ceiling);
- the market pool (5,400 rows built from ``../shared/data``) through the CLI path, cold, then
  again from the cache;
- named parts: ``excel`` (the market pool's rows as Excel cells, each with its caller and recalculated
  as Excel does, against the CLI on the other rows), ``documents`` (the same rows, each with a
  document-sized text in a CSV field) and ``files`` (the same rows, each naming its own report PDF,
  through ``xladdin screen --reports``).

Each part merges its numbers into the day's run in ``--out`` (default ``bench/results/gpu.json``: its
``runs``, oldest first) as it ends, so a run can be split over several commands (``--parts``); another
day, or ``--new-run``, appends a run (``gpu_render`` shows every run). Every part uses rows no other part asked,
so the server's prefix cache never serves one part's prompts to another.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import datetime as dt
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from xladdin.core.batcher import Batcher
from xladdin.core.resolver import Resolver
from xladdin.engine.openai_http import OpenAIHTTPEngine, metric_sums, request_fields
from xladdin.jobs.pool_screen import screen_file
from xladdin.settings import Settings
from xladdin.tasks import ScreenTask

from .common import RESULTS, SHARED_DATA, read_runs, rows, write_runs
from .report_files import copy_maker

DATA = SHARED_DATA / "wengowl_stock_tushare2016"
TASK = ScreenTask()
PARTS = ("per_cell", "default", "bare", "sweep", "market", "excel", "documents", "files", "ray_files")
DEFAULT_PARTS = PARTS[:-4]  # excel, documents, files, ray_files: named (they take minutes, or texts or PDFs
# carried to the box)
# the annual-report PDFs part files copies (carried to the GPU box: cp ../shared/data/ashare/annual_reports/*.pdf)
PDFS = Path(__file__).parent.parent / ".gpu" / "run" / "pdfs"
POOL_HEADER = ["代码", "名称", "行业", "市盈率TTM", "ROE", "每股收益", "净利润(万元)", "财报摘要"]


# ------------------------------------------------------------------ the market pool
def _report_text(period: str, r: dict[str, str]) -> str:
    return (f"{period}：归属于上市公司股东的净利润{r['net_profits']}万元，同比增长{r['profits_yoy']}%；"
            f"基本每股收益{r['eps']}元，同比{r['eps_yoy']}%；净资产收益率{r['roe']}%，每股净资产{r['bvps']}元。")


def _profit_text(period: str, r: dict[str, str]) -> str:
    return (f"{period}：营业收入{r['business_income']}百万元，归属于上市公司股东的净利润{r['net_profits']}百万元；"
            f"净资产收益率{r['roe']}%，销售净利率{r['net_profit_ratio']}%，毛利率{r['gross_profit_rate']}%；"
            f"基本每股收益{r['eps']}元。")


# (file, period, text of one row, net profit in 万元): distinct inputs, one per company and source
MARKET_SOURCES = (
    ("report2015_4.csv", "2015年年报", _report_text, lambda r: r["net_profits"]),
    ("report2016_2.csv", "2016年半年报", _report_text, lambda r: r["net_profits"]),
    ("profit2015_4.csv", "2015年度盈利能力", _profit_text, lambda r: str(round(float(r["net_profits"] or 0) * 100, 2))),
)


def load_basics() -> dict[str, dict[str, str]] | None:
    """tushare's stock_basics (industry, PE …) by six-digit code; ``None`` without ``../shared/data``."""
    path = DATA / "stock_basics.csv"
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as f:
        return {r["code"].zfill(6): r for r in csv.DictReader(f)}


def build_market_pool(path: Path, limit: int = 5400) -> Path | None:
    """Up to ``limit`` distinct rows from real results: each A-share's FY2015 annual report,
    2016 half-year report and FY2015 profitability (tushare, ~2,900 companies each), joined with
    its industry and PE. ``None`` without ``../shared/data``."""
    basics = load_basics()
    if basics is None:
        return None
    seen: set[tuple[str, str]] = set()
    with path.open("w", encoding="utf-8", newline="") as out:
        w = csv.writer(out)
        w.writerow(POOL_HEADER)
        for name, period, text, profit_wan in MARKET_SOURCES:
            with (DATA / name).open(encoding="utf-8") as f:
                for r in csv.DictReader(f):
                    code = r["code"].zfill(6)
                    if (code, period) in seen:  # tushare repeats some rows: every input distinct
                        continue
                    if len(seen) >= limit:
                        return path
                    seen.add((code, period))
                    b = basics.get(code, {})
                    w.writerow([code, r["name"], b.get("industry", ""), b.get("pe", ""), r["roe"], r["eps"],
                                profit_wan(r), text(period, r)])
    return path


def synthetic_pool(path: Path, n: int) -> Path:
    """A pool of ``n`` generated rows, where ``../shared/data`` is absent (CI)."""
    with path.open("w", encoding="utf-8", newline="") as out:
        w = csv.writer(out)
        w.writerow(POOL_HEADER)
        for r in rows(n, seed=900):
            w.writerow([r["code"], r["name"], r["industry"], r["pe_ttm"], r["roe"], r["eps"], "", r["report_text"]])
    return path


# ------------------------------------------------------------------ the document pool
FINGLM = SHARED_DATA / "finglm" / "parsed_annual_report_300617_2019.json"
NOTES = SHARED_DATA / "cfbenchmark" / "basic_summary.jsonl"
DOC_CHARS = 20_000  # of the annual report per row: a document, not a summary


def flatten_report(path: Path) -> str:
    """A parsed annual report (FinGLM's JSON) as text, each section's heading on its own line."""
    data = json.loads(path.read_text(encoding="utf-8"))
    lines, last = [], None
    for items in data.values():
        for item in items:
            titles = item.get("title_hierarchy") or []
            if titles and titles[-1] != last:
                last = titles[-1]
                lines.append(last)
            if item.get("content"):
                lines.append(str(item["content"]))
    return "\n".join(lines)


def build_doc_source(path: Path) -> Path | None:
    """The texts the document pool is made of, in one small gzipped file that travels to the GPU box:
    the whole annual report and the broker notes. ``None`` without ``../shared/data``."""
    import gzip

    if not FINGLM.is_file() or not NOTES.is_file():
        return None
    notes = [json.loads(line)["input"] for line in NOTES.read_text(encoding="utf-8").splitlines() if line.strip()]
    path.write_bytes(gzip.compress(json.dumps({"report": flatten_report(FINGLM), "notes": notes},
                                              ensure_ascii=False).encode("utf-8")))
    return path


def build_document_pool(path: Path, market_pool: Path, source: Path) -> Path:
    """The market pool's rows, each with a document-sized report text: its own results sentence, a
    broker note, and 20,000 characters of an annual report (a different window for every row, so no
    row's text is a prefix of another's)."""
    import gzip

    src = json.loads(gzip.decompress(source.read_bytes()))
    report, notes = src["report"], src["notes"]
    span = len(report) - DOC_CHARS
    with market_pool.open(encoding="utf-8") as f, path.open("w", encoding="utf-8", newline="") as out:
        reader, w = csv.reader(f), csv.writer(out)
        header = next(reader)
        w.writerow(header)
        text_at = header.index("财报摘要")
        for i, row in enumerate(reader):
            at = (i * 7919) % span
            row[text_at] = "\n".join((row[text_at], notes[i % len(notes)], report[at : at + DOC_CHARS]))
            w.writerow(row)
    return path


# ------------------------------------------------------------------ the report-file pool
def build_files_pool(path: Path, market_pool: Path, reports: Path, pdfs: list[Path]) -> int:
    """The market pool's rows without their report text, each naming its own report file in ``reports``:
    a copy of one of ``pdfs`` made distinct, its text too, by a first page of its own (``copy CODE``), one file per code
    (``CODE_年报.pdf``). The pool repeats a company (its annual report, half-year report and profitability
    rows), and a row is matched to its file by code: a code's later rows take codes no row uses. Each copy is
    its source's template with its code put in (``report_files.copy_maker``). Returns the rows."""
    with market_pool.open(encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        data = list(reader)
    at, text_at = header.index("代码"), header.index("财报摘要")
    used = {row[at] for row in data}
    free = (f"{n:06d}" for n in (*range(600000, 610000), *range(1, 10000)) if f"{n:06d}" not in used)
    seen: set[str] = set()
    reports.mkdir(parents=True, exist_ok=True)
    makers = [copy_maker(p.read_bytes()) for p in pdfs]
    with path.open("w", encoding="utf-8", newline="") as out:
        w = csv.writer(out)
        w.writerow(header[:text_at] + header[text_at + 1 :])
        for i, row in enumerate(data):
            code = row[at] if row[at] not in seen else next(free)
            seen.add(code)
            row[at] = code
            (reports / f"{code}_年报.pdf").write_bytes(makers[i % len(makers)](code))
            w.writerow(row[:text_at] + row[text_at + 1 :])
            if (i + 1) % 1000 == 0:
                print(f"  {i + 1} of {len(data)} report files written", flush=True)
    return len(data)


class RunningSampler:
    """vLLM's ``num_requests_running`` and ``num_requests_waiting`` (``/metrics``, summed over servers),
    and the share of the machine's CPU time busy (``/proc/stat``, where there is one), sampled about once
    a second in a thread while a run lasts."""

    NAMES = frozenset({"vllm:num_requests_running", "vllm:num_requests_waiting"})

    def __init__(self, url: str, every: float = 1.0):
        self.bases = [u.strip().rstrip("/").removesuffix("/v1") for u in url.split(",")]
        self.every = every
        self.samples: list[tuple[float, float, float]] = []  # (seconds since start, running, waiting)
        self.cpu_busy: list[float] = []  # the machine's busy share of each interval between samples
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)

    def __enter__(self) -> RunningSampler:
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _cpu_times() -> tuple[float, float] | None:
        """The machine's (busy, total) CPU time so far, from ``/proc/stat``; ``None`` where it is absent."""
        try:
            fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
        return total - fields[3] - fields[4], total

    def _run(self) -> None:
        last = self._cpu_times()
        while not self._stop.is_set():
            t = time.perf_counter()
            now = self._cpu_times()
            if last and now and now[1] > last[1]:
                self.cpu_busy.append((now[0] - last[0]) / (now[1] - last[1]))
            last = now
            running = waiting = 0.0
            for base in self.bases:
                text = _get_text(base + "/metrics")
                if text is None:
                    break
                found = metric_sums(text, self.NAMES)
                running += found.get("vllm:num_requests_running", 0.0)
                waiting += found.get("vllm:num_requests_waiting", 0.0)
            else:
                self.samples.append((round(t - self._t0, 1), running, waiting))
            self._stop.wait(max(0.0, self.every - (time.perf_counter() - t)))

    def summary(self) -> dict[str, Any] | None:
        """The median of the middle half of the samples (the steady state: ramp-up and tail left out),
        with its quartiles, and every tenth sample as a timeline."""
        if not self.samples:
            return None
        n = len(self.samples)
        middle = self.samples[n // 4 : n - n // 4] or self.samples
        running = [s[1] for s in middle]
        q = statistics.quantiles(running, n=4) if len(running) > 1 else [running[0]] * 3
        cpu = self.cpu_busy[len(self.cpu_busy) // 4 : len(self.cpu_busy) - len(self.cpu_busy) // 4]
        return {"samples": n, "steady_median": statistics.median(running), "steady_quartiles": [q[0], q[2]],
                "steady_waiting_median": statistics.median(s[2] for s in middle),
                "peak": max(s[1] for s in self.samples),
                "steady_machine_cpu_busy": round(statistics.median(cpu), 3) if cpu else None,
                "every_10th": [[t, int(r), int(w)] for t, r, w in self.samples[::10]]}


# ------------------------------------------------------------------ the parts
def _settings(url: str, workdir: Path, **extra: Any) -> Settings:
    return Settings.load({"engine_url": url, "cache_dir": workdir / "cache", "no_cache": True, **extra})


def _rate(n: int, seconds: float) -> float:
    return round(n / seconds, 2) if seconds > 0 else float("inf")


def _batcher_run(settings: Settings, data: list[dict[str, Any]]) -> dict[str, Any]:
    with Batcher.from_settings(settings) as b:
        b.start()
        before = server_counters(settings.openai_http.url)
        t0, cpu = time.perf_counter(), time.process_time()
        results = Resolver(b).map(TASK, data)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu
        server = server_side(before, server_counters(settings.openai_http.url), seconds, len(b.engine.urls))
        snap = b.snapshot()
        tokens = getattr(b.engine, "completion_tokens", 0)
    errors = [r for r in results if isinstance(r, Exception)]
    return {"rows": len(data), "seconds": round(seconds, 2), "rows_per_s": _rate(len(data), seconds),
            "errors": len(errors), "first_error": str(errors[0]) if errors else None,
            "peak_in_engine": snap["peak_in_engine"], "final_window": snap["max_parallel"],
            "completion_tokens_per_row": round(tokens / max(1, len(data)), 1),
            "client_cpu_share": round(cpu / seconds, 3) if seconds > 0 else None, "server": server}


def per_cell(url: str, workdir: Path, n: int) -> dict[str, Any]:
    """One request at a time, each waiting for the previous answer."""
    settings = _settings(url, workdir)
    engine = OpenAIHTTPEngine(settings.openai_http)
    params = settings.sampling

    async def go() -> float:
        await engine.start()
        t0 = time.perf_counter()
        for r in rows(n, seed=100):
            inp = TASK.parse(r)
            TASK.validate_output(await engine.complete(TASK.messages(inp), TASK.schema_for(inp), params), inp)
        seconds = time.perf_counter() - t0
        await engine.aclose()
        return seconds

    seconds = asyncio.run(go())
    return {"rows": n, "seconds": round(seconds, 2), "rows_per_s": _rate(n, seconds)}


def default(url: str, workdir: Path, n: int) -> dict[str, Any]:
    """The batcher exactly as a user gets it: no in-flight setting."""
    return _batcher_run(_settings(url, workdir), rows(n, seed=101))


def sweep(url: str, workdir: Path, n: int, limits: list[int]) -> list[dict[str, Any]]:
    """The batcher at fixed in-flight limits; small limits get fewer rows (at least 8 waves)."""
    out = []
    for k, limit in enumerate(limits):
        size = min(n, max(64, 8 * limit))
        run = _batcher_run(_settings(url, workdir, max_parallel=limit), rows(size, seed=110 + k))
        out.append({"max_parallel": limit, **run})
        print(f"  sweep {limit}: {run['rows_per_s']} rows/s ({size} rows, {run['errors']} errors)", flush=True)
    return out


def bare(url: str, workdir: Path, n: int, concurrency: list[int | None]) -> list[dict[str, Any]]:
    """A bare AsyncOpenAI client sending the batcher's requests, ``None`` = all at once."""
    import openai

    settings = _settings(url, workdir)
    engine = OpenAIHTTPEngine(settings.openai_http)
    out = []

    async def go(data: list[dict[str, Any]], limit: int | None) -> tuple[float, int]:
        await engine.start()
        clients = [openai.AsyncOpenAI(base_url=u, api_key="EMPTY", timeout=600, max_retries=0) for u in engine.urls]
        sem = asyncio.Semaphore(limit or len(data))
        errors = 0

        async def one(i: int, r: dict[str, Any]) -> None:
            nonlocal errors
            inp = TASK.parse(r)
            async with sem:
                try:
                    resp = await clients[i % len(clients)].chat.completions.create(
                        model=engine.served, temperature=0.0, seed=42, max_tokens=settings.sampling.max_tokens,
                        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
                        **request_fields(TASK.messages(inp), TASK.schema_for(inp), True),
                    )
                    TASK.validate_output(resp.choices[0].message.content or "", inp)
                except Exception:
                    errors += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i, r) for i, r in enumerate(data)))
        seconds = time.perf_counter() - t0
        for client in clients:
            await client.close()
        return seconds, errors

    for k, limit in enumerate(concurrency):
        data = rows(n, seed=130 + k)
        seconds, errors = asyncio.run(go(data, limit))
        out.append({"concurrency": limit or "all", "rows": n, "seconds": round(seconds, 2),
                    "rows_per_s": _rate(n, seconds), "errors": errors})
        print(f"  bare {limit or 'all'}: {out[-1]['rows_per_s']} rows/s ({errors} errors)", flush=True)
    return out


def market(url: str, workdir: Path, pool: Path, name: str = "market", rerun: bool = True) -> dict[str, Any]:
    """The CLI path (``screen_file``): cold, then (``rerun``) again answered from the cache."""
    settings = _settings(url, workdir, no_cache=False, cache_dir=str(workdir / f"{name}-cache"))
    with Batcher.from_settings(settings) as b:
        before, cpu = server_counters(url), time.process_time()
        with RunningSampler(url) as sampler:
            cold = screen_file(pool, workdir / f"{name}-report.csv", settings, progress=False, batcher=b)
        cpu = time.process_time() - cpu
        server = server_side(before, server_counters(url), cold.seconds, len(url.split(",")))
        tokens = getattr(b.engine, "completion_tokens", 0)
        text_chars = b.fit(TASK).text_limit
    again = {}
    if rerun:
        warm = screen_file(pool, workdir / f"{name}-report-2.csv", settings, progress=False)
        again = {"rerun_seconds": round(warm.seconds, 2), "rerun_cache_hits": warm.cache_hits}
    return {"rows": cold.rows, "seconds": round(cold.seconds, 2), "errors": cold.errors,
            "rows_per_s": round(cold.rows_per_second, 2), **again, "pool": pool.name, "text_chars_per_row": text_chars,
            "completion_tokens_per_row": round(tokens / max(1, cold.rows), 1),
            # the client's CPU seconds per second of the run (1.0 = one core busy: the client bounds it)
            "client_cpu_share": round(cpu / cold.seconds, 3) if cold.seconds > 0 else None,
            "server": server, "running_requests": sampler.summary()}


def excel_rows(pool: Path) -> list[dict[str, Any]]:
    """The market pool's rows as ``bench/excel_path``'s arms take them: a row of cells in ``QWEN_SCREEN``'s
    positional order (code as text, numbers as the floats Excel hands over)."""
    from .excel_path import FIELDS

    def cell(value: str) -> Any:
        try:
            return float(value)
        except ValueError:
            return value

    with pool.open(encoding="utf-8", newline="") as f:
        found = list(csv.DictReader(f))
    columns = [POOL_HEADER[i] for i in (0, 1, 2, 3, 4, 5, 7)]  # 净利润(万元) left out: a positional row has no unit
    return [{k: (r[c] if k in ("code", "name", "industry", "report_text") else cell(r[c]))
             for k, c in zip(FIELDS, columns, strict=True)} for r in found]


def excel(url: str, workdir: Path, pool: Path) -> dict[str, Any]:
    """The Excel path against the CLI on one server (``bench/excel_path``'s two arms): the market pool's rows
    in four quarters, asked CLI, Excel, Excel, CLI (each arm's mean place in the order the same), each run on rows no
    other run asked and a fresh cache; each arm's seconds are the sum of its two runs."""
    from .excel_path import cli as cli_arm
    from .excel_path import excel as excel_arm

    data = excel_rows(pool)
    q = len(data) // 4
    runs = []
    for k, arm in enumerate(("cli", "excel", "excel", "cli")):
        work = workdir / f"excel-{k}"
        work.mkdir()
        runs.append({"arm": arm, **(cli_arm if arm == "cli" else excel_arm)(url, work, data[k * q:(k + 1) * q])})
        print(f"  {json.dumps(runs[-1])}", flush=True)
    seconds = {arm: round(sum(r["seconds"] for r in runs if r["arm"] == arm), 3) for arm in ("cli", "excel")}
    return {"rows_per_arm": 2 * q, "runs": runs, "cli_seconds": seconds["cli"], "excel_seconds": seconds["excel"],
            "excel_over_cli": round(seconds["excel"] / seconds["cli"], 3),
            "errors": sum(r["errors"] for r in runs)}


def files(url: str, workdir: Path, pool: Path, pdf_dir: Path, rerun: bool = True) -> dict[str, Any]:
    """The market pool's rows, each naming its own report file (``build_files_pool``), through
    ``xladdin screen POOL --reports DIR`` in a process of its own (``bench/report_files.py``'s
    ``cli_run``: its peak RSS is its own), cold, then (``rerun``) the same command again on its cache;
    ``XLADDIN_READERS`` sets its reader processes."""
    from .report_files import cli_run

    pdfs = sorted(pdf_dir.glob("*.pdf"))
    reports = workdir / "reports"
    t0 = time.perf_counter()
    n = build_files_pool(workdir / "files.csv", pool, reports, pdfs)
    built = time.perf_counter() - t0
    readers = int(os.environ["XLADDIN_READERS"]) if os.environ.get("XLADDIN_READERS") else None
    before, cpu = server_counters(url), resource.getrusage(resource.RUSAGE_CHILDREN)
    with RunningSampler(url) as sampler:
        run = cli_run(url, workdir / "files.csv", reports, workdir / "files-cache", workdir / "files-out.json",
                      readers)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds per second of the run of the client and of the descendants counted as its children (its
    # reader processes, where the system counts them so: on the H200 box it did); the machine's busy share
    # is the sampler's
    used = (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)
    side = server_side(before, server_counters(url), run["seconds"], len(url.split(",")))
    again = {}
    if rerun:  # every answer and every file's text from the cache: the client's own time
        warm = cli_run(url, workdir / "files.csv", reports, workdir / "files-cache", workdir / "files-out-2.json",
                       readers)
        again = {f"rerun_{k}": warm[k] for k in ("seconds", "errors", "files_read", "files_from_store",
                                                  "results_recalled", "client_peak_rss_mib")}
        again["rerun_over_first"] = round(warm["seconds"] / run["seconds"], 4)
        print(f"  files rerun: {json.dumps(again)}", flush=True)
    shutil.rmtree(reports, ignore_errors=True)
    return {**run, **again, "pool": f"the market pool's {n} rows, each with its own report file (copies of {len(pdfs)} "
            "annual-report PDFs, each made distinct)", "pdfs": len(pdfs), "files_built_s": round(built, 1),
            "readers": readers or os.cpu_count(), "client_and_readers_cpu_share": round(used / run["seconds"], 3),
            "prompt_tokens_per_row": round(side["prompt_tokens"] / run["rows"]) if side and run["rows"] else None,
            "server": side, "running_requests": sampler.summary()}


def ray_files(workdir: Path, pool: Path, pdf_dir: Path, model: str, engine_kwargs: str, actors: int) -> dict[str, Any]:
    """Part ``files``'s rows (the same pool, the same files) through ``xladdin screen --reports --ray local
    --ray-engine vllm``: ray.data.llm's vLLM processor, one vLLM engine inside the job (no server: stop it
    first, the GPU is the engine's), in a process of its own on an empty cache; its wall seconds from start
    to end (Ray's start and the engine's load included, as the server's are not in part ``files``)."""
    pdfs = sorted(pdf_dir.glob("*.pdf"))
    reports, out = workdir / "reports", workdir / "ray-out.json"
    n = build_files_pool(workdir / "files.csv", pool, reports, pdfs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    env["XLADDIN_CACHE_DIR"] = str(workdir / "ray-cache")
    command = [sys.executable, "-m", "xladdin.cli.main", "screen", str(workdir / "files.csv"), "--reports",
               str(reports), "-o", str(out), "--no-progress", "--ray", "local", "--ray-engine", "vllm",
               "--ray-model", model, "--ray-engine-kwargs", engine_kwargs, "--ray-actors", str(actors)]
    t0 = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    shutil.rmtree(reports, ignore_errors=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"xladdin screen --ray failed ({proc.returncode}): {proc.stderr[-3000:]}")
    run = json.loads(out.read_text(encoding="utf-8"))["run"]
    return {"seconds": round(seconds, 3), "rows": run["rows"], "errors": run["errors"],
            "engine_requests": run["engine_requests"], "without_answer": run.get("without_answer"),
            "files_read": run["files_read"], "rows_per_s": round(run["rows"] / seconds, 2), "ray": run.get("ray"),
            "pool": f"part files' {n} rows and files", "command": " ".join(command[3:])}


# ------------------------------------------------------------------ what was measured on
def _get_text(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def _get_json(url: str) -> Any:
    text = _get_text(url)
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


# vLLM's counters and histograms (``/metrics``) whose change over a run says where the server's time went
_NAMES = ("prompt_tokens_total", "generation_tokens_total", "prefix_cache_queries_total",
          "prefix_cache_hits_total", "num_preemptions_total", "iteration_tokens_total_count",
          "iteration_tokens_total_sum", "inter_token_latency_seconds_sum", "inter_token_latency_seconds_count",
          "request_queue_time_seconds_sum", "request_queue_time_seconds_count",
          "time_to_first_token_seconds_sum", "time_to_first_token_seconds_count")
_COUNTERS = frozenset("vllm:" + name for name in _NAMES)


def server_counters(url: str) -> dict[str, float] | None:
    """The counters above, summed over labels and servers; ``None`` when a server has no vLLM metrics."""
    found: dict[str, float] = {}
    for base in url.split(","):
        text = _get_text(base.strip().rstrip("/").removesuffix("/v1") + "/metrics")
        if text is None:
            return None
        for name, value in metric_sums(text, _COUNTERS).items():
            found[name] = found.get(name, 0.0) + value
    return {name.removeprefix("vllm:"): value for name, value in found.items()} or None


def server_side(before: dict[str, float] | None, after: dict[str, float] | None, seconds: float,
                servers: int = 1) -> dict | None:
    """What the servers did during a run of ``seconds``: tokens, prefix-cache hits, engine steps (each
    server steps on its own: ms per step is per server)."""
    if not before or not after:
        return None
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in _NAMES}

    def ratio(a: float, b: float, scale: float = 1.0, digits: int = 1) -> float | None:
        return round(a / b * scale, digits) if b else None

    steps = d["iteration_tokens_total_count"]
    return {"prompt_tokens": int(d["prompt_tokens_total"]), "generated_tokens": int(d["generation_tokens_total"]),
            "prefix_cache_hit_rate": ratio(d["prefix_cache_hits_total"], d["prefix_cache_queries_total"], 1, 3),
            "preemptions": int(d["num_preemptions_total"]), "engine_steps": int(steps),
            "tokens_per_step": ratio(d["iteration_tokens_total_sum"], steps),
            "ms_per_step": ratio(seconds * servers, steps, 1000.0),
            "generated_tokens_per_s": ratio(d["generation_tokens_total"], seconds, 1.0, 0),
            "mean_inter_token_ms": ratio(d["inter_token_latency_seconds_sum"], d["inter_token_latency_seconds_count"],
                                         1000.0),
            "mean_queue_s": ratio(d["request_queue_time_seconds_sum"], d["request_queue_time_seconds_count"], 1, 2),
            "mean_first_token_s": ratio(d["time_to_first_token_seconds_sum"],
                                        d["time_to_first_token_seconds_count"], 1, 2)}


def server_facts(url: str) -> dict[str, Any]:
    """What serves ``url`` (the first of several replicas: they serve one model)."""
    urls = url.split(",")
    root = urls[0].strip().rstrip("/").removesuffix("/v1")
    models = _get_json(root + "/v1/models") or {}
    first = (models.get("data") or [{}])[0]
    version = _get_json(root + "/version") or {}
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        gpu = None
    return {"gpu": gpu, "vllm": version.get("version"), "model": first.get("root") or first.get("id"),
            "served_model": first.get("id"), "max_model_len": first.get("max_model_len"),
            "servers": len(urls)}


def summarise(data: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers, derived from the parts present."""
    out: dict[str, Any] = {}
    if "per_cell" in data:
        out["per_cell_rows_per_s"] = data["per_cell"]["rows_per_s"]
    if "default_run" in data:
        out["default_rows_per_s"] = data["default_run"]["rows_per_s"]
    runs = [s["rows_per_s"] for s in data.get("sweep", [])] + [out.get("default_rows_per_s", 0)]
    if any(runs):
        out["batched_rows_per_s"] = max(runs)
    if data.get("bare_runs"):
        out["best_bare_rows_per_s"] = max(b["rows_per_s"] for b in data["bare_runs"])
    if "per_cell_rows_per_s" in out and "batched_rows_per_s" in out:
        out["batched_over_per_cell"] = round(out["batched_rows_per_s"] / out["per_cell_rows_per_s"], 1)
    if "default_rows_per_s" in out and "best_bare_rows_per_s" in out:
        out["default_over_best_bare"] = round(out["default_rows_per_s"] / out["best_bare_rows_per_s"], 3)
    if data.get("sweep") and "default_rows_per_s" in out:
        best = max(s["rows_per_s"] for s in data["sweep"])
        out["default_over_best_sweep"] = round(out["default_rows_per_s"] / best, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--engine-url", help="the server, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    p.add_argument("--rows", type=int, default=2048, help="rows per batched run")
    p.add_argument("--per-cell-rows", type=int, default=16)
    p.add_argument("--sweep", default="32,64,128,256,512,1024", help="fixed in-flight limits to measure")
    p.add_argument("--bare", default="256,1024",
                   help="bare-client concurrencies (all = every request at once; past the server's --max-num-seqs "
                        "requests only queue, and 2,048 at once through one AsyncOpenAI client did not finish in "
                        "350 s on the H200 where 256 took 71 s)")
    p.add_argument("--pool", help="market pool CSV (default: built from ../shared/data, else generated)")
    p.add_argument("--market-rows", type=int, default=5400)
    p.add_argument("--build-pool", metavar="CSV", help="only write the market pool to CSV and stop")
    p.add_argument("--build-doc-source", metavar="FILE", help="only write the document pool's texts and stop")
    p.add_argument("--doc-source", help="the document pool's texts (--build-doc-source), for part documents")
    p.add_argument("--pdfs", default=str(PDFS), help="folder of the annual-report PDFs part files copies")
    p.add_argument("--no-rerun", action="store_true",
                   help="skip the reruns from the cache (parts market, documents, files)")
    p.add_argument("--server-flags", default="", help="the server's command line, recorded in the results")
    p.add_argument("--ray-model", default=os.environ.get("MODEL_DIR", "Qwen/Qwen3-8B"),
                   help="part ray_files: the model's source [default: $MODEL_DIR]")
    p.add_argument("--ray-engine-kwargs", default='{"load_format": "dummy"}',
                   help="part ray_files: vLLM engine arguments over the qwen3-8b-h200 profile's")
    p.add_argument("--ray-actors", type=int, default=4, help="part ray_files: actors preparing and finishing rows")
    p.add_argument("--out", default=str(RESULTS / "gpu.json"))
    p.add_argument("--new-run", action="store_true", help="append a new run even if today's is there (another "
                   "box, other server flags)")
    args = p.parse_args(argv)
    if args.build_pool:
        built = build_market_pool(Path(args.build_pool), args.market_rows)
        print(f"wrote {built}" if built else "../shared/data not present: nothing written")
        return 0 if built else 1
    if args.build_doc_source:
        built = build_doc_source(Path(args.build_doc_source))
        print(f"wrote {built}" if built else "../shared/data not present: nothing written")
        return 0 if built else 1
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        p.error(f"unknown parts: {', '.join(sorted(unknown))}")
    if "files" in parts and not any(Path(args.pdfs).glob("*.pdf")):
        print(f"part files: no PDFs in {args.pdfs} (copy ../shared/data/ashare/annual_reports/*.pdf there, or "
              "name a folder with --pdfs)", file=sys.stderr)
        return 2
    if not args.engine_url and parts != ["ray_files"]:
        p.error("--engine-url is required")
    out = Path(args.out)
    runs = read_runs(out)
    today = dt.date.today().isoformat()
    if runs and "doc" not in runs[-1] and runs[-1].get("when") == today and not args.new_run:
        data = runs[-1]  # today's run: this command's parts join it
    else:
        data = {"when": today}
        runs.append(data)
    if args.engine_url:
        data.update(server_facts(args.engine_url))
    data["task_version"] = TASK.version
    if args.server_flags:
        data["server_flags"] = args.server_flags
    workdir = Path(tempfile.mkdtemp(prefix="xladdin-gpu-bench-"))
    for part in parts:
        t0 = time.perf_counter()
        print(f"{part}…", flush=True)
        if part == "per_cell":
            data["per_cell"] = per_cell(args.engine_url, workdir, args.per_cell_rows)
        elif part == "default":
            data["default_run"] = default(args.engine_url, workdir, args.rows)
        elif part == "sweep":
            data["sweep"] = sweep(args.engine_url, workdir, args.rows, [int(x) for x in args.sweep.split(",")])
        elif part == "bare":
            levels = [None if x == "all" else int(x) for x in args.bare.split(",")]
            data["bare_runs"] = bare(args.engine_url, workdir, args.rows, levels)
        else:
            pool = Path(args.pool) if args.pool else build_market_pool(workdir / "market.csv", args.market_rows)
            pool = pool or synthetic_pool(workdir / "market.csv", args.market_rows)
            if part == "market":
                data["market"] = market(args.engine_url, workdir, pool, rerun=not args.no_rerun)
            elif part == "excel":
                data["excel_vs_cli"] = excel(args.engine_url, workdir, pool)
            elif part == "ray_files":
                data["ray_files"] = ray_files(workdir, pool, Path(args.pdfs), args.ray_model, args.ray_engine_kwargs,
                                              args.ray_actors)
                if "files" in data:  # the CLI against one vLLM server, same rows, same box
                    data["ray_files"]["over_cli"] = round(data["ray_files"]["seconds"] / data["files"]["seconds"], 3)
            elif part == "files":
                data["files"] = files(args.engine_url, workdir, pool, Path(args.pdfs), rerun=not args.no_rerun)
                if "documents" in data:  # the text-field pool of the same rows, on the same server
                    data["files"]["over_documents"] = round(data["files"]["seconds"] / data["documents"]["seconds"],
                                                            3)
            else:
                source = Path(args.doc_source) if args.doc_source else build_doc_source(workdir / "docs.json.gz")
                if source is None:
                    p.error("part documents needs --doc-source or ../shared/data")
                docs = build_document_pool(workdir / "documents.csv", pool, source)
                run = market(args.engine_url, workdir, docs, name="documents", rerun=not args.no_rerun)
                side = run.get("server") or {}
                run["prompt_tokens_per_row"] = round(side["prompt_tokens"] / run["rows"]) if side else None
                data["documents"] = run
        data.update(summarise(data))
        write_runs(out, runs, "gpu")
        shown = {k: v for k, v in data.items()
                 if k in {"per_cell", "default_run", "market", "excel_vs_cli", "documents", "files", "ray_files"}
                 and k.startswith(part[:4])}
        print(f"{part} done in {time.perf_counter() - t0:.0f} s {json.dumps(shown, ensure_ascii=False)}", flush=True)
    print(json.dumps(summarise(data), indent=2))
    return 0
