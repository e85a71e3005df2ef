"""Real engines: the embedded engine with the tiny generated Qwen3 model, and the
OpenAI-compatible HTTP client against that engine's own llama.cpp HTTP port."""

import os
import subprocess
from pathlib import Path

import kit
import openpyxl
import pytest
from conftest import TINY_MAX_TOKENS, tiny_settings
from kit import cli_command, wait_until

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Resolver
from xladdin.engine.openai_http import OpenAIHTTPEngine
from xladdin.errors import EngineOffline
from xladdin.reading.pool import SAMPLE_POOL, read_pool
from xladdin.tasks import ScreenResult, ScreenTask
from xladdin.tasks.rules import assess

pytestmark = pytest.mark.slow
SAMPLE = SAMPLE_POOL
TASK = ScreenTask()


def sample_records(n=None):
    recs = read_pool(SAMPLE).records()
    return recs[:n] if n else recs


def expected(rec):
    inp = TASK.parse(rec)
    return assess(roe=inp.roe, pe_ttm=inp.pe_ttm, is_st=inp.is_st, net_profit=inp.net_profit,
                  net_profit_prev=inp.net_profit_prev)


def test_embedded_engine_screens_by_the_rules(tiny_engine, tmp_path):
    settings = tiny_settings(tmp_path)
    recs = sample_records(8)
    with Batcher.from_settings(settings, engine=tiny_engine) as b:
        results = Resolver(b).map(TASK, recs)
        assert all(isinstance(r, ScreenResult) for r in results), results
        for rec, res in zip(recs, results, strict=True):
            v = expected(rec)
            assert (res.risk_level, res.score) == (v.risk_level, v.score)
            assert len(res.reason) <= 30 and res.provenance.model == tiny_engine.model_id
        assert Resolver(b).map(TASK, recs) == results  # the same core: from its table
        assert b.snapshot()["engine_requests"] == len(recs)
    with Batcher.from_settings(settings, engine=tiny_engine) as b:  # the next run: from the disk
        again = Resolver(b).map(TASK, recs)
        assert all(r.provenance.cached for r in again)
        assert [r.model_dump(exclude={"provenance"}) for r in again] == [
            r.model_dump(exclude={"provenance"}) for r in results
        ]
        assert b.snapshot()["engine_requests"] == 0


def test_http_engine_gives_the_same_results(tiny_engine, tmp_path):
    recs = sample_records(4)
    with Batcher.from_settings(tiny_settings(tmp_path / "a"), engine=tiny_engine) as b:
        direct = Resolver(b).map(TASK, recs)
    settings = tiny_settings(tmp_path / "b", engine_url=tiny_engine.address)
    with Batcher.from_settings(settings) as b:
        assert isinstance(b.engine, OpenAIHTTPEngine)
        over_http = Resolver(b).map(TASK, recs)
        # the server names its model by the weights file's identity: the embedded engine's own
        assert b.engine.model_id == tiny_engine.model_id
    assert all(isinstance(r, ScreenResult) for r in over_http), over_http
    same = [r.model_dump(exclude={"provenance"}) for r in direct]
    assert [r.model_dump(exclude={"provenance"}) for r in over_http] == same
    # one cache for every door: the rows the embedded engine answered (the CLI's) are the CPU server's hits
    # (Calc's private server, a LAN server), the same model file on either side
    with Batcher.from_settings(tiny_settings(tmp_path / "a", engine_url=tiny_engine.address)) as b:
        again = Resolver(b).map(TASK, recs)
        assert b.snapshot()["engine_requests"] == 0 and all(r.provenance.cached for r in again)
    assert [r.model_dump(exclude={"provenance"}) for r in again] == same


def test_engine_offline_is_an_error_value_within_the_timeout(tmp_path):
    settings = tiny_settings(tmp_path, engine_url="http://127.0.0.1:9/v1", served_model="m", timeout=2, retries=0)
    with Batcher.from_settings(settings) as b:
        results = Resolver(b).map(TASK, sample_records(3))
        asked = b.snapshot()["engine_requests"]
    assert asked == 0  # one failed start, shared by the rows
    assert all(isinstance(r, EngineOffline) and str(r) == "engine offline (http://127.0.0.1:9/v1)" for r in results)
    assert Cache(tmp_path / "cache").stats()["entries"] == 0


def run_cli(*args, env_extra=None, **kw):
    env = dict(os.environ, XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS), **(env_extra or {}))
    return kit.run_cli(*args, env=env, **kw)


def test_cli_screens_the_sample_pool_then_reruns_from_cache(tiny_model_path, tmp_path):
    out = tmp_path / "r.xlsx"
    args = ["screen", str(SAMPLE), "-o", str(out), "--model", str(tiny_model_path), "--no-progress"]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    n = len(sample_records())
    assert f"{n} rows, 0 from cache, 0 errors" in first.stdout
    rows = list(openpyxl.load_workbook(out)["Results"].iter_rows(values_only=True))
    header, body = rows[0], rows[1:]
    risk, score = header.index("风险等级 risk"), header.index("评分 score")
    for rec, row in zip(sample_records(), body, strict=True):
        v = expected(rec)
        assert (row[risk], row[score]) == (v.risk_level.value, v.score)
    second = run_cli(*args)
    assert second.returncode == 0 and f"{n} rows, {n} from cache, 0 errors" in second.stdout
    cached = header.index("缓存命中 cached")
    assert all(r[cached] for r in list(openpyxl.load_workbook(out)["Results"].iter_rows(values_only=True))[1:])


def test_cli_errors_are_one_line(tmp_path):
    r = run_cli("screen", str(tmp_path / "missing.csv"))
    assert r.returncode == 2 and r.stderr.strip() == f"xladdin: error: input file not found: {tmp_path / 'missing.csv'}"
    r = run_cli("screen", str(SAMPLE), "-o", str(tmp_path / "report.txt"))
    assert r.returncode == 2 and r.stderr.strip() == "xladdin: error: output report.txt: expected .xlsx, .csv or .json"
    r = run_cli("screen", str(SAMPLE), "--model", str(tmp_path / "none.gguf"), "-o", str(tmp_path / "x.xlsx"))
    assert r.returncode == 2 and "model file not found" in r.stderr and "Traceback" not in r.stderr


def test_killed_run_resumes_without_losing_rows(tiny_model_path, tmp_path):
    pool = tmp_path / "pool.csv"
    lines = ["代码,名称,ROE,市盈率TTM,财报摘要"]
    lines += [
        f"{600000 + i},公司{i},{5 + i % 20},{10 + i},2023年营业收入{100 + i}亿元，同比增长{i % 30}%。"
        for i in range(60)
    ]
    pool.write_text("\n".join(lines), encoding="utf-8")
    args = ["screen", str(pool), "-o", str(tmp_path / "r.csv"), "--model", str(tiny_model_path), "--no-progress",
            "--parallel", "2"]
    env = dict(os.environ, XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS))
    proc = subprocess.Popen(cli_command(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cache_dir = Path(os.environ["XLADDIN_CACHE_DIR"])
    wait_until(lambda: proc.poll() is not None or (cache_dir.exists() and Cache(cache_dir).stats()["entries"] >= 5),
               120, 0.2, message="the run stored no five answers")
    proc.kill()
    proc.wait()
    done = Cache(cache_dir).stats()["entries"]
    assert 5 <= done < 60, done
    rerun = run_cli(*args)
    assert rerun.returncode == 0, rerun.stderr
    hits = int(rerun.stdout.split(" rows, ")[1].split(" from cache")[0])
    assert hits >= done  # every answer stored before the kill is served from the cache
    assert Cache(cache_dir).stats()["entries"] == 60


def test_cache_commands(tiny_model_path, tmp_path):
    run_cli("screen", str(SAMPLE), "-o", str(tmp_path / "r.csv"), "--model", str(tiny_model_path), "--no-progress")
    stats = run_cli("cache", "stats")
    assert stats.returncode == 0 and f'"entries": {len(sample_records())}' in stats.stdout
    cleared = run_cli("cache", "clear")
    assert cleared.returncode == 0 and cleared.stdout.startswith(f"removed {len(sample_records())} entries")
    assert '"entries": 0' in run_cli("cache", "stats").stdout


def test_a_run_answered_from_the_cache_never_loads_the_weights(tiny_model, tmp_path):
    from xladdin.engine.embedded import EmbeddedEngine

    settings = tiny_settings(tmp_path)
    first = EmbeddedEngine(settings.embedded, tiny_model)
    with Batcher.from_settings(settings, engine=first) as b:
        assert all(isinstance(r, ScreenResult) for r in Resolver(b).map(TASK, sample_records(2)))
    assert first.address is not None  # loaded for the misses
    first.close()
    second = EmbeddedEngine(settings.embedded, tiny_model)
    with Batcher.from_settings(settings, engine=second) as b:
        results = Resolver(b).map(TASK, sample_records(2))
    assert all(r.provenance.cached for r in results)
    assert second.address is None and second.model_id == first.model_id  # identified, never loaded
