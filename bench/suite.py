"""The five benchmarks. Each measures its alternatives side by side in one run on
the same engine and model, and returns a dict saved to bench/results/NAME.json."""

from __future__ import annotations

import asyncio
import csv
import time
from pathlib import Path
from typing import Any

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Resolver
from xladdin.engine.base import SamplingParams
from xladdin.excel import udfs
from xladdin.jobs.pool_screen import screen_file
from xladdin.reading.pool import SAMPLE_POOL
from xladdin.sheet.functions import CellRuntime
from xladdin.tasks import ClassifyTask, ScreenTask
from xladdin.testing import ScriptedEngine, screen_answer

from .common import SHARED_DATA, Env, median, percentile, rows, rss_mib, timed

SHARED = SHARED_DATA / "screening_rows_2016_from_wengowl.csv"
SAMPLE = SAMPLE_POOL
TASK = ScreenTask()


def _params(env: Env) -> SamplingParams:
    return env.settings.sampling


def _no_cache_batcher(env: Env) -> Batcher:
    return Batcher(env.engine, Cache(None, enabled=False), params=_params(env),
                   window_ms=env.settings.batch_window_ms)  # the engine has its max_parallel (its options)


def batched_vs_per_cell(env: Env, sizes: tuple[int, ...]) -> dict[str, Any]:
    """(a) one request at a time, as a naive UDF; (b) our batcher; (c) a bare client at full concurrency."""
    engine, params = env.engine, _params(env)

    def prepared(n: int, seed: int):
        return [(TASK.messages(inp), TASK.schema_for(inp), inp) for inp in (TASK.parse(r) for r in rows(n, seed))]

    async def sequential(reqs):
        for messages, schema, inp in reqs:
            TASK.validate_output(await engine.complete(messages, schema, params), inp)

    async def bare(reqs):
        sem = asyncio.Semaphore(engine.max_parallel)

        async def one(messages, schema, inp):
            async with sem:
                TASK.validate_output(await engine.complete(messages, schema, params), inp)

        await asyncio.gather(*(one(*req) for req in reqs))

    out: dict[str, Any] = {"slots": engine.max_parallel, "sizes": {}}
    for i, n in enumerate(sizes):  # the three arms get the same rows (answer length follows the input)
        a, _ = timed(asyncio.run, sequential(prepared(n, 10 + i)))
        with _no_cache_batcher(env) as b:
            b.start()
            t, results = timed(Resolver(b).map, TASK, rows(n, 10 + i))
            failures = [r for r in results if isinstance(r, Exception)]
            assert not failures, failures[:1]
        c, _ = timed(asyncio.run, bare(prepared(n, 10 + i)))
        out["sizes"][n] = {"per_cell_s": round(a, 3), "batcher_s": round(t, 3), "bare_client_s": round(c, 3),
                           "speedup_b_over_a": round(a / t, 2), "efficiency_b_over_c": round(c / t, 3)}
    return out


def cached_recalc(env: Env, cells: int) -> dict[str, Any]:
    """``cells`` QWEN_SCREEN calls answered from the cache through the UDF path."""
    data = rows(cells, 20)
    filler = ScriptedEngine(lambda m: screen_answer("缓存基准"), model_id=env.engine.model_id, max_parallel=64)
    settings = env.settings_for("recalc")
    with Batcher(filler, Cache(settings.cache_dir), params=_params(env)) as b:
        warm = {"code": 600000, "name": "预热", "industry": "", "pe_ttm": 10, "roe": 10, "eps": 1, "report_text": ""}
        Resolver(b).map(TASK, [*data, warm])  # the cache as the engine left it (the timed path never asks it)
    batcher = Batcher(env.engine, Cache(settings.cache_dir), params=_params(env))
    udfs.set_runtime(CellRuntime(batcher=batcher))
    try:
        excel_rows = [[r["code"], r["name"], r["industry"], r["pe_ttm"], r["roe"], r["eps"], r["report_text"]]
                      for r in data]
        udfs.QWEN_SCREEN([[600000, "预热", "", 10, 10, 1, ""]])  # warm imports with a row that is not in the sheet
        passes = {}
        # first pass: a workbook just opened (answers from the disk cache); second: Excel recalculates it
        for name in ("opened", "recalculated"):
            times = []
            t0 = time.perf_counter()
            for row in excel_rows:
                s = time.perf_counter()
                out = udfs.QWEN_SCREEN([row])
                times.append(time.perf_counter() - s)
                assert not str(out[0][0]).startswith("#QWEN"), out[0][0]
            total = time.perf_counter() - t0
            us = [t * 1e6 for t in times]
            passes[name] = {"total_s": round(total, 3), "p50_us": round(percentile(us, 50), 1),
                            "p99_us": round(percentile(us, 99), 1)}
        assert batcher.snapshot()["engine_requests"] == 0
    finally:
        udfs.set_runtime(None)
    return {"cells": cells, **passes, "goal_total_s": 1.0}


def memory(env: Env, requests: int) -> dict[str, Any]:
    """``requests`` distinct engine requests through one long-lived batcher (short classify answers)."""
    task = ClassifyTask()
    data = [{"text": f"第{i}号公告：公司{i % 97}营业收入增长{i % 50}%", "labels": ["利好", "利空", "中性"]}
            for i in range(requests)]
    warm, chunk = 500, 500
    failed = 0
    samples = []
    with _no_cache_batcher(env) as b:
        b.start()
        Resolver(b).map(task, data[:warm])  # warm-up: allocator pools, prompt cache, grammar cache
        start = rss_mib()
        t0 = time.perf_counter()
        for i in range(warm, requests, chunk):  # results are dropped, as a long-lived Excel session does
            failed += sum(isinstance(r, Exception) for r in Resolver(b).map(task, data[i : i + chunk]))
            samples.append(round(rss_mib(), 1))
        t = time.perf_counter() - t0
        end = rss_mib()
        asked = b.snapshot()["engine_requests"]
    return {"requests": requests - warm, "engine_requests": asked - warm, "failed": failed, "seconds": round(t, 1),
            "rss_start_mib": round(start, 1), "rss_end_mib": round(end, 1), "rss_per_500_mib": samples,
            "growth_pct": round((end - start) / start * 100, 2), "goal_growth_pct": 5.0}


def stack_overhead(env: Env, samples: int) -> dict[str, Any]:
    """One uncached cell through UDF → task → batcher → cache → engine vs one bare engine call."""
    engine, params = env.engine, _params(env)
    batcher = Batcher(engine, Cache(env.settings_for("overhead").cache_dir), params=params)
    udfs.set_runtime(CellRuntime(batcher=batcher))
    bare, stack = [], []
    try:
        for r_bare in rows(samples, 30):  # the same row both ways (the bare call caches nothing)
            r_stack = r_bare
            inp = TASK.parse(r_bare)
            t, _ = timed(asyncio.run, engine.complete(TASK.messages(inp), TASK.schema_for(inp), params))
            bare.append(t)
            cells = [[r_stack[k] for k in ("code", "name", "industry", "pe_ttm", "roe", "eps", "report_text")]]
            t, _ = timed(udfs.QWEN_SCREEN, cells)
            stack.append(t)
    finally:
        udfs.set_runtime(None)
    return {"samples": samples, "bare_ms_median": round(median(bare) * 1e3, 2),
            "stack_ms_median": round(median(stack) * 1e3, 2),
            "added_ms_median": round((median(stack) - median(bare)) * 1e3, 2),
            "batch_window_ms": env.settings.batch_window_ms}


def _shared_pool(path: Path, limit: int) -> Path | None:
    if not SHARED.is_file():
        return None
    with SHARED.open(encoding="utf-8") as f, path.open("w", encoding="utf-8", newline="") as out:
        w = csv.writer(out)
        w.writerow(["代码", "名称", "行业", "市盈率TTM", "ROE", "每股收益", "净利润(万元)", "ST", "财报摘要"])
        for i, r in enumerate(csv.DictReader(f)):
            if i >= limit:
                break
            text = (f"2015年归母净利润{r['net_profit_fy2015_wan']}万元，同比增长{r['net_profit_yoy_fy2015_pct']}%；"
                    f"基本每股收益{r['eps_fy2015']}元，净资产收益率{r['roe_fy2015_pct']}%。")
            w.writerow([r["code"], r["name"], r["industry"], r["pe_tushare_snapshot_2016_09"], r["roe_fy2015_pct"],
                        r["eps_fy2015"], r["net_profit_fy2015_wan"], r["is_st"], text])
    return path


def whole_pool(env: Env, big_rows: int) -> dict[str, Any]:
    """The CLI path on the sample pool and on a pool built from ../shared/data (skipped when absent)."""
    pools = {"sample_pool": SAMPLE}
    big = _shared_pool(env.workdir / "shared_pool.csv", big_rows)
    out: dict[str, Any] = {}
    if big is None:
        out["shared_pool"] = "skipped: ../shared/data not present"
    else:
        pools[f"shared_pool_{big_rows}"] = big
    for name, path in pools.items():
        settings = env.settings_for(f"pool-{name}")
        with Batcher.from_settings(settings, engine=env.engine) as b:
            cold = screen_file(path, env.workdir / f"{name}.csv", settings, progress=False, batcher=b)
            warm = screen_file(path, env.workdir / f"{name}-2.csv", settings, progress=False, batcher=b)
        out[name] = {"rows": cold.rows, "errors": cold.errors, "cold_s": round(cold.seconds, 2),
                     "cold_rows_per_s": round(cold.rows_per_second, 2), "warm_s": round(warm.seconds, 3),
                     "warm_rows_per_s": round(warm.rows_per_second, 1), "warm_cache_hits": warm.cache_hits}
    return {"pools": out}
