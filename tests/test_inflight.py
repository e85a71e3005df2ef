"""The in-flight window: fixed for slots and user limits, adapted to a server that reports its load."""

import asyncio
import json
import os
import subprocess
import sys

import pytest
from conftest import TINY_MAX_TOKENS, MockServer, Server, tiny_settings, vllm_models
from kit import free_port

from xladdin.core import batcher as batcher_module
from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Resolver
from xladdin.core.window import INITIAL, Window, margin
from xladdin.engine.openai_http import ADAPTIVE_CAP, OpenAIHTTPEngine
from xladdin.errors import EngineError
from xladdin.tasks import ScreenTask
from xladdin.testing import ScriptedEngine, screen_answer


def test_window_doubles_while_the_server_takes_everything_then_settles():
    w = Window.adaptive_up_to(1024)
    assert w.limit == INITIAL
    assert w.update(running=64, waiting=0, in_engine=64, queued=500) == 128
    assert w.update(running=128, waiting=0, in_engine=128, queued=400) == 256
    # requests wait while the running count still grows: being admitted, not full; the window stays
    assert w.update(running=200, waiting=56, in_engine=256, queued=300) == 256
    assert w.update(running=200, waiting=56, in_engine=256, queued=300) == 200 + margin(200)  # no more taken: full
    assert w.update(running=200, waiting=12, in_engine=212, queued=0) == 212  # stays while full
    assert w.update(running=10, waiting=0, in_engine=10, queued=0) == 212  # nothing queued here: no change
    for _ in range(10):
        w.update(running=w.limit, waiting=0, in_engine=w.limit, queued=10_000)
    assert w.limit == 1024  # never past the cap
    fixed = Window.fixed(32)
    assert (fixed.limit, fixed.cap, fixed.adaptive) == (32, 32, False)


def test_requests_waiting_while_the_server_admits_them_do_not_cut_the_window():
    """A server admits a burst over several steps (so many new prompts a step): readings while its running
    count grows show requests waiting; the window is not cut to what runs so far."""
    w = Window.adaptive_up_to(2048)
    w.limit = 1024
    for running in (300, 600, 900, 1000):
        assert w.update(running=running, waiting=1024 - running, in_engine=1024, queued=2000) == 1024
    assert w.update(running=1000, waiting=24, in_engine=1024, queued=2000) == 1000 + margin(1000)  # full now


class LoadedEngine(ScriptedEngine):
    """A server that runs ``capacity`` requests at once and queues the rest, and says so."""

    reports_load = True

    def __init__(self, capacity, **kw):
        super().__init__(lambda _: screen_answer(), **kw)
        self.capacity = capacity
        self.readings = 0
        self.waiting = 0

    async def complete(self, messages, schema, params):
        self.waiting += 1
        while self.in_flight >= self.capacity:  # waits in the server's queue
            await asyncio.sleep(0.005)
        self.waiting -= 1
        return await super().complete(messages, schema, params)

    async def server_load(self):
        self.readings += 1
        return self.in_flight, self.waiting


@pytest.mark.slow
def test_the_batcher_window_follows_the_server(tmp_path, monkeypatch):
    monkeypatch.setattr(batcher_module, "CONTROL_INTERVAL_S", 0.05)
    # answers in 0.4 s: 128 in flight needs ~320 rows/s from the table's thread (at 0.1 s it needed 1,280/s,
    # which a slow 2-core machine did not always give: the server never filled and the window never settled)
    engine = LoadedEngine(capacity=100, delay=0.4, max_parallel=ADAPTIVE_CAP)
    rows = [{"code": 600000 + i % 1000, "name": f"公司{i}", "roe": 10, "pe_ttm": 20} for i in range(1500)]
    with Batcher(engine, Cache(tmp_path / "c"), window_ms=0) as b:
        b.start()
        assert b.window.adaptive and b.window.limit == INITIAL
        limits = []
        update = b.window.update
        b.window.update = lambda *a, **kw: limits.append(update(*a, **kw)) or limits[-1]
        results = Resolver(b).map(ScreenTask(), rows)
        assert not [r for r in results if isinstance(r, Exception)]
        assert engine.readings >= 2 and b.peak_in_engine > INITIAL  # it grew past the start
        assert 100 + margin(100) in limits  # and settled at what the server runs, plus a margin
        assert max(limits) <= 2 * (100 + margin(100))  # never far past it


def test_a_user_limit_is_kept(tmp_path):
    engine = LoadedEngine(capacity=100, max_parallel=ADAPTIVE_CAP)
    engine.parallel_limit = 16  # the user's, from the engine's options (its max_parallel)
    with Batcher(engine, Cache(tmp_path / "c")) as b:
        b.start()
        assert not b.window.adaptive and b.window.limit == 16


def metrics(running: int, waiting: int) -> tuple[int, str, bytes]:
    """/metrics as vLLM exposes it (Prometheus text, one line per engine)."""
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge"]
    for engine in (0, 1):
        lines.append(f'vllm:num_requests_running{{engine="{engine}",model_name="qwen"}} {running / 2}')
        lines.append(f'vllm:num_requests_waiting{{engine="{engine}",model_name="qwen"}} {waiting / 2}')
        lines.append(f'vllm:num_requests_waiting_by_reason{{engine="{engine}",reason="capacity"}} 99.0')
    return 200, "text/plain; version=0.0.4", "\n".join(lines).encode()


def test_a_vllm_server_makes_the_default_window_adaptive(tmp_path):
    server = MockServer({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/metrics": metrics(300, 40)})
    plain = MockServer({"/v1/models": vllm_models("Qwen/Qwen3-8B")})  # no /metrics (llama.cpp, SGLang…)
    try:
        engine = server.engine(tiny_settings(tmp_path, engine_url=server.url))
        with Batcher(engine, Cache(tmp_path / "c")) as b:
            b.start()
            assert asyncio.run(engine.server_load()) == (300, 40)  # summed over both engines
            assert b.window.adaptive and b.window.cap == ADAPTIVE_CAP
        fixed = server.engine(tiny_settings(tmp_path, engine_url=server.url, max_parallel=8))
        with Batcher(fixed, Cache(tmp_path / "c2")) as b:
            b.start()
            assert not b.window.adaptive and b.window.limit == 8
        other = plain.engine(tiny_settings(tmp_path, engine_url=plain.url))
        with Batcher(other, Cache(tmp_path / "c3")) as b:
            b.start()
            assert not b.window.adaptive and b.window.limit == 32
    finally:
        server.close()
        plain.close()


def test_a_vllm_server_with_several_front_ends_gets_a_full_fixed_window(tmp_path):
    """vLLM with several HTTP front ends (``--api-server-count``) has its token counters in /metrics but no
    running/waiting gauges: the window is the adaptive one's cap, fixed (it was 32, the default for a
    server that says nothing: on one H200 the pool ran at ~25 in flight)."""
    counters = (200, "text/plain; version=0.0.4", b'vllm:generation_tokens_total{engine="0"} 10.0\n'
                b'vllm:prompt_tokens_total{engine="0"} 90.0\n')
    server = MockServer({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/metrics": counters})
    try:
        engine = server.engine(tiny_settings(tmp_path, engine_url=server.url))
        with Batcher(engine, Cache(tmp_path / "c")) as b:
            b.start()
            assert not b.window.adaptive and b.window.limit == ADAPTIVE_CAP
    finally:
        server.close()


def test_replicas_are_one_engine_of_one_model(tmp_path):
    a = Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/metrics": metrics(300, 40)})
    b = Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/metrics": metrics(100, 0)})
    other = Server({"/v1/models": vllm_models("Qwen/Qwen3-4B")})
    try:
        engine = OpenAIHTTPEngine(tiny_settings(tmp_path, engine_url=f"{a.url}, {b.url}").openai_http)
        asyncio.run(engine.start())
        assert engine.urls == [a.url, b.url] and engine.model_id == "Qwen/Qwen3-8B"
        assert asyncio.run(engine.server_load()) == (400, 40) and engine.max_parallel == 2 * ADAPTIVE_CAP
        mixed = OpenAIHTTPEngine(tiny_settings(tmp_path, engine_url=f"{a.url},{other.url}").openai_http)
        with pytest.raises(EngineError, match="serve different models"):
            asyncio.run(mixed.start())
    finally:
        for s in (a, b, other):
            s.close()


@pytest.mark.slow
def test_requests_spread_over_two_real_servers(tiny_model_path, tmp_path):
    """Two CPU servers (llama.cpp) of one model behind one engine URL list: both answer."""
    from xladdin.server import launcher
    from xladdin.tasks import ScreenResult

    env = dict(os.environ, XLADDIN_N_THREADS="1")
    ports = [free_port(), free_port()]
    cmds = [launcher.cpu_server_command(str(tiny_model_path), host="127.0.0.1", port=p, parallel=1) for p in ports]
    with launcher.ServerProcess(cmds[0], f"http://127.0.0.1:{ports[0]}", env=env) as s1, \
         launcher.ServerProcess(cmds[1], f"http://127.0.0.1:{ports[1]}", env=env) as s2:
        s1.wait_ready(120)
        s2.wait_ready(120)
        url = ",".join(f"http://127.0.0.1:{p}/v1" for p in ports)
        rows = [{"code": 600000 + i, "name": f"公司{i}", "roe": 12, "pe_ttm": 20, "report_text": f"营收{100 + i}亿元"}
                for i in range(4)]
        with Batcher.from_settings(tiny_settings(tmp_path, engine_url=url)) as b:
            results = Resolver(b).map(ScreenTask(), rows)
            answered = list(b.engine.answered)
    assert all(isinstance(r, ScreenResult) for r in results), results
    assert sum(answered) == 4 and min(answered) >= 1, answered


@pytest.mark.slow
def test_more_requests_in_flight_than_the_server_has_slots_each_get_an_answer_against_a_real_server(
        tiny_model_path, tmp_path):
    """40 requests in flight at once to a CPU server of 2 slots (the rest wait in its queue on their own
    connections): every row answered, all 40 held at once."""
    from xladdin.server import launcher
    from xladdin.tasks import ScreenResult

    port = free_port()
    cmd = launcher.cpu_server_command(str(tiny_model_path), host="127.0.0.1", port=port, parallel=2)
    n = 40
    with launcher.ServerProcess(cmd, f"http://127.0.0.1:{port}", env=dict(os.environ, XLADDIN_N_THREADS="1")) as s:
        s.wait_ready(120)
        rows = [{"code": 600000 + i, "name": f"公司{i}", "roe": 12, "pe_ttm": 20, "report_text": f"营收{100 + i}亿元"}
                for i in range(n)]
        settings = tiny_settings(tmp_path, engine_url=f"http://127.0.0.1:{port}/v1", max_parallel=n)
        with Batcher.from_settings(settings) as b:
            results = Resolver(b).map(ScreenTask(), rows)
            peak = b.snapshot()["peak_in_engine"]
    assert all(isinstance(r, ScreenResult) for r in results), [r for r in results if not isinstance(r, ScreenResult)]
    assert peak == n, peak


@pytest.mark.slow
def test_gpu_benchmark_runs_against_the_cpu_server(tiny_model_path, tmp_path):
    """``python -m bench gpu`` in CI size against ``xladdin-server serve --engine cpu`` (no timings asserted):
    its run is appended to the results file's runs, and the section shows it above the runs before it."""
    import time

    port = free_port()
    env = dict(os.environ, XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS))
    server = subprocess.Popen([sys.executable, "-m", "xladdin.server", "serve", "--engine", "cpu", "--model",
                               str(tiny_model_path), "--port", str(port), "--parallel", "2"],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not server.stdout.readline().startswith("ready:"):
            pass
        out = tmp_path / "gpu.json"
        out.write_text(json.dumps({"bench": "gpu", "runs": [{"when": "2026-01-01", "doc": ["an earlier run", ""]}]}),
                       encoding="utf-8")
        r = subprocess.run([sys.executable, "-m", "bench", "gpu", "--engine-url", f"http://127.0.0.1:{port}/v1",
                            "--rows", "6", "--per-cell-rows", "2", "--sweep", "1,2", "--bare", "2,all",
                            "--market-rows", "8", "--out", str(out)],
                           capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, r.stderr[-2000:]
    finally:
        server.terminate()
        server.wait(30)
    from bench import gpu_render

    runs = json.loads(out.read_text(encoding="utf-8"))["runs"]
    assert len(runs) == 2 and runs[0]["doc"] == ["an earlier run", ""]  # the earlier run kept as it was
    data = runs[-1]  # the run this command made
    shown = "\n".join(gpu_render.render({"runs": runs}))
    assert shown.index(f"### {data['when']}") < shown.index("an earlier run") and "batcher, default settings" in shown
    for key in ("gpu", "vllm", "model", "market", "per_cell_rows_per_s", "default_rows_per_s",
                "batched_rows_per_s", "best_bare_rows_per_s", "sweep"):
        assert key in data, key
    assert data["market"]["errors"] == 0 and data["market"]["rerun_cache_hits"] == data["market"]["rows"]
    assert data["market"]["completion_tokens_per_row"] > 0  # as the server counted them (usage)
    assert 0 < data["market"]["client_cpu_share"] and 0 < data["default_run"]["client_cpu_share"]
    assert data["task_version"] == ScreenTask.version  # what was measured
    assert data["default_run"]["errors"] == 0 and [s["max_parallel"] for s in data["sweep"]] == [1, 2]
    assert all(s["errors"] == 0 for s in data["sweep"]) and all(b["errors"] == 0 for b in data["bare_runs"])


def test_gpu_benchmark_reads_what_the_servers_did_from_their_metrics():
    """``bench gpu``: vLLM's counters before and after a run, summed over servers; ms per step per server."""
    from bench.gpu import server_counters, server_side

    def counters(steps: int, generated: int, hits: int) -> tuple[int, str, bytes]:
        lines = ["# TYPE vllm:generation_tokens_total counter",
                 f'vllm:generation_tokens_total{{engine="0",model_name="qwen"}} {generated}.0',
                 'vllm:generation_tokens_created{engine="0",model_name="qwen"} 1.7e9',
                 f'vllm:prefix_cache_queries_total{{engine="0",model_name="qwen"}} {4 * hits}.0',
                 f'vllm:prefix_cache_hits_total{{engine="0",model_name="qwen"}} {hits}.0',
                 f'vllm:iteration_tokens_total_count{{engine="0",model_name="qwen"}} {steps}.0',
                 f'vllm:iteration_tokens_total_sum{{engine="0",model_name="qwen"}} {steps * 500}.0',
                 f'vllm:iteration_tokens_total_bucket{{engine="0",le="+Inf",model_name="qwen"}} {steps}.0']
        return 200, "text/plain; version=0.0.4", "\n".join(lines).encode()

    a = Server({"/metrics": counters(100, 1000, 10)})
    b = Server({"/metrics": counters(300, 3000, 30)})
    plain = Server({})  # a server without vLLM's metrics
    try:
        before = server_counters(f"{a.url},{b.url}")
        a.routes["/metrics"], b.routes["/metrics"] = counters(600, 6000, 110), counters(800, 8000, 130)
        after = server_counters(f"{a.url},{b.url}")
        assert server_counters(plain.url) is None
    finally:
        for s in (a, b, plain):
            s.close()
    assert before["iteration_tokens_total_count"] == 400 and after["generation_tokens_total"] == 14000
    side = server_side(before, after, seconds=10.0, servers=2)
    assert side["engine_steps"] == 1000 and side["tokens_per_step"] == 500.0
    assert side["ms_per_step"] == 20.0  # 10 s, 500 steps per server
    assert side["generated_tokens_per_s"] == 1000.0 and side["prefix_cache_hit_rate"] == 0.25
    assert server_side(None, after, 10.0) is None
