"""server/: profiles → vLLM commands (pure; vLLM itself needs a GPU and cannot run here),
and the real launcher lifecycle with the CPU engine serving the tiny model."""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest
from conftest import TINY_MAX_TOKENS, tiny_settings
from kit import free_port, run_cli

from xladdin.core.batcher import Batcher
from xladdin.core.resolver import Resolver
from xladdin.engine import processes, profiles
from xladdin.errors import ConfigError, EngineError
from xladdin.reading.pool import SAMPLE_POOL
from xladdin.server import launcher
from xladdin.server.cli import main as server_main
from xladdin.server.verify import read_manifest, sha256_file, verify
from xladdin.tasks import ScreenResult, ScreenTask

ALL = profiles.load_profiles()


def test_profiles_each_explained():
    assert {"qwen3.5-9b-24gb", "qwen3-8b-awq-16gb", "qwen3-30b-a3b-awq-24gb", "qwen3.5-9b-80gb", "qwen3-8b-h200",
            "qwen3-8b-fp8-h100", "qwen3-8b-fp8-h200"} <= set(ALL)
    for p in ALL.values():
        for key in ("max_model_len", "gpu_memory_utilization", "max_num_seqs", "disable_thinking"):
            assert p.why.get(key), (p.name, key)
    assert ALL["qwen3-8b-awq-16gb"].quantization and ALL["qwen3-30b-a3b-awq-24gb"].quantization
    assert ALL["qwen3.5-9b-80gb"].max_num_seqs > ALL["qwen3.5-9b-24gb"].max_num_seqs


@pytest.mark.parametrize("name", sorted(ALL))
def test_command_is_valid_for_vllm(name):
    cmd = profiles.vllm_command(ALL[name])
    assert cmd[:3] == ["vllm", "serve", ALL[name].model]
    assert "--enforce-eager" not in cmd and "--data-parallel-size" not in cmd
    assert profiles.vllm_command(ALL[name], gpus=2)[-2:] == ["--data-parallel-size", "2"]
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert args["--host"] == "127.0.0.1"
    assert json.loads(args["--default-chat-template-kwargs"]) == {"enable_thinking": False}
    compact = {"backend": "xgrammar", "disable_any_whitespace": True}  # compact JSON: fewer tokens per answer
    assert json.loads(args["--structured-outputs-config"]) == compact
    assert not any(a.startswith("--guided") for a in cmd) and "--api-key" not in args
    assert set(args) <= profiles.VLLM_FLAGS
    if ALL[name].cudagraph_capture_size:  # the H200 profile, as measured: batches up to 1,024 as CUDA graphs
        assert json.loads(args["--compilation-config"]) == {"max_cudagraph_capture_size": 1024}
    else:
        assert "--compilation-config" not in args
    if name in ("qwen3-8b-h200", "qwen3-8b-fp8-h200"):  # document rows are mostly prefill: 16,384 tokens a step
        assert args["--max-num-batched-tokens"] == "16384"
    else:
        assert "--max-num-batched-tokens" not in args


@pytest.mark.skipif(shutil.which("vllm") is None, reason="vLLM not installed (GPU machines only)")
def test_command_flags_exist_in_installed_vllm():
    help_text = subprocess.run(["vllm", "serve", "--help=all"], capture_output=True, text=True, timeout=300).stdout
    for flag in profiles.VLLM_FLAGS:
        assert flag in help_text, flag


@pytest.mark.parametrize("flag", sorted(profiles.REMOVED_FLAGS))
def test_removed_flags_are_rejected(flag):
    with pytest.raises(ConfigError, match="removed from vLLM"):
        profiles.check_flags(["vllm", "serve", "m", flag, "1"])
    with pytest.raises(ConfigError, match="not known"):
        profiles.check_flags(["vllm", "serve", "m", "--made-up-flag", "1"])


def test_fp8_h200_profile_is_the_h200_profile_with_fp8_weights():
    """What box 9 measured (bench/results/gpu.json, short_pool_trials): the H200 whole-pool flags plus
    --quantization fp8, never picked by auto (FP8 may change a figure)."""
    bf16, fp8 = ALL["qwen3-8b-h200"], ALL["qwen3-8b-fp8-h200"]
    assert not fp8.auto and fp8.quantization == "fp8" and bf16.quantization is None
    extra = profiles.vllm_command(fp8)
    assert extra[extra.index("--quantization") + 1] == "fp8"
    i = extra.index("--quantization")
    assert extra[:i] + extra[i + 2:] == profiles.vllm_command(bf16)


def test_auto_profile_by_gpu_memory():
    assert profiles.auto_profile(24.0)[0].name == "qwen3.5-9b-24gb"
    assert profiles.auto_profile(16.0)[0].name == "qwen3-8b-awq-16gb"
    best, why = profiles.auto_profile(80.0)
    assert best.name == "qwen3.5-9b-80gb" and "80 GiB" in why  # FP8 trades accuracy: chosen by name only
    assert profiles.auto_profile(141.0)[0].name == "qwen3-8b-h200"
    with pytest.raises(ConfigError, match="no NVIDIA GPU"):
        profiles.auto_profile(None)
    with pytest.raises(ConfigError, match="below every profile"):
        profiles.auto_profile(8.0)


def test_dry_run_and_safe_defaults(capsys, monkeypatch):
    assert server_main(["serve", "--profile", "qwen3.5-9b-24gb", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("command: vllm serve Qwen/Qwen3.5-9B") and "--host 127.0.0.1" in out
    assert server_main(["serve", "--host", "0.0.0.0", "--dry-run"]) == 2
    assert "set --api-key" in capsys.readouterr().err
    assert server_main(["serve", "--host", "0.0.0.0", "--api-key", "k3y-kept-secret-1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "k3y-kept-secret-1" not in out and "--api-key" not in out  # neither printed nor in the argv
    assert "api key: k3y…-1 (17 characters), passed in the environment" in out
    assert server_main(["serve", "--profile", "nope", "--dry-run"]) == 2


def test_gpus_start_one_server_per_gpu_unless_data_parallel(capsys):
    assert server_main(["serve", "--profile", "qwen3-8b-h200", "--gpus", "2", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(" vllm ")[0] for ln in lines] == [f"command: CUDA_VISIBLE_DEVICES={i}" for i in (0, 1)]
    assert "--port 8000 " in lines[0] and "--port 8001 " in lines[1] and "--data-parallel-size" not in lines[1]
    assert server_main(["serve", "--profile", "qwen3-8b-h200", "--gpus", "2", "--data-parallel", "--dry-run"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("command: vllm serve") and line.endswith("--data-parallel-size 2")
    assert server_main(["serve", "--engine", "cpu", "--gpus", "2", "--dry-run"]) == 2
    assert "--gpus is for --engine vllm" in capsys.readouterr().err
    specs = launcher.one_per_gpu(["vllm", "serve", "m", "--port", "9000"], "http://h:9000", 9000, 2, {"A": "1"})
    assert [(s.cmd[-1], s.url, s.env) for s in specs] == [
        ("9000", "http://h:9000", {"A": "1", "CUDA_VISIBLE_DEVICES": "0"}),
        ("9001", "http://h:9001", {"A": "1", "CUDA_VISIBLE_DEVICES": "1"})]


@pytest.mark.slow
def test_several_servers_start_serve_as_one_engine_and_all_stop(tiny_model_path, tmp_path):
    ports = [free_port(), free_port()]
    env = dict(os.environ, XLADDIN_N_THREADS="1")  # two llama.cpp servers on two cores
    specs = [launcher.ServerSpec(launcher.cpu_server_command(str(tiny_model_path), host="127.0.0.1", port=p,
                                                             parallel=1), f"http://127.0.0.1:{p}", env)
             for p in ports]
    seen = {}

    def ready(urls):
        seen["urls"] = urls
        rows = [{"code": 600000 + i, "name": f"公司{i}", "roe": 20, "pe_ttm": 10, "report_text": f"营收{i}亿元"}
                for i in range(4)]
        with Batcher.from_settings(tiny_settings(tmp_path, engine_url=",".join(f"{u}/v1" for u in urls))) as b:
            seen["results"] = Resolver(b).map(ScreenTask(), rows)
            seen["answered"] = list(b.engine.answered)
        raise KeyboardInterrupt  # Ctrl-C once the rows are screened

    codes = launcher.run_servers(specs, timeout=120, on_ready=ready)
    assert seen["urls"] == [f"http://127.0.0.1:{p}" for p in ports]
    assert all(isinstance(r, ScreenResult) for r in seen["results"]) and min(seen["answered"]) >= 1
    assert codes == [0, 0]
    for port in ports:  # every server is gone: its port is free again
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))


def test_diagnosis_reads_the_output():
    assert processes.diagnose(["torch.OutOfMemoryError: CUDA out of memory."]).startswith("out of GPU memory")
    assert processes.diagnose(["ERROR: [Errno 98] Address already in use"]).startswith("port in use")
    assert processes.diagnose(["Model architectures ['FooForCausalLM'] are not supported for now."]).startswith(
        "unknown model architecture"
    )
    assert processes.diagnose(["something else"]) == "the server exited"


@pytest.mark.slow
def test_cpu_server_lifecycle_with_and_without_key(tiny_model_path, tmp_path):
    port = free_port()
    cmd = launcher.cpu_server_command(str(tiny_model_path), host="127.0.0.1", port=port, parallel=2)
    url = f"http://127.0.0.1:{port}"
    env = launcher.key_env("XLADDIN_API_KEY", "s3cret")
    with launcher.ServerProcess(cmd, url, api_key="s3cret", env=env) as server:
        server.wait_ready(120)
        with open(f"/proc/{server.proc.pid}/cmdline", "rb") as f:
            assert b"s3cret" not in f.read()  # not visible in ps
        rows = [{"code": "600519", "name": "贵州茅台", "roe": 30, "pe_ttm": 25, "report_text": "营收1505亿元"}]
        keyed = tiny_settings(tmp_path / "a", engine_url=f"{url}/v1", api_key="s3cret")
        with Batcher.from_settings(keyed) as b:
            (res,) = Resolver(b).map(ScreenTask(), rows)
        assert isinstance(res, ScreenResult) and res.risk_level.value == "低"
        keyless = tiny_settings(tmp_path / "b", engine_url=f"{url}/v1", served_model="x", retries=0)
        with Batcher.from_settings(keyless) as b:
            (err,) = Resolver(b).map(ScreenTask(), rows)
        assert isinstance(err, EngineError) and "API key rejected" in str(err)
        pid = server.proc.pid
    assert server.proc.returncode == 0 and "cpu server: stopped" in "\n".join(server.lines)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # no orphan


@pytest.mark.slow
def test_cli_screen_over_the_cpu_server(tiny_model_path, tmp_path):
    port = free_port()
    cmd = launcher.cpu_server_command(str(tiny_model_path), host="127.0.0.1", port=port, parallel=2)
    with launcher.ServerProcess(cmd, f"http://127.0.0.1:{port}") as server:
        server.wait_ready(120)
        env = dict(
            os.environ, XLADDIN_ENGINE_URL=f"http://127.0.0.1:{port}/v1", XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS)
        )
        sample = str(SAMPLE_POOL)
        r = run_cli("screen", sample, "-o", tmp_path / "r.json", "--no-progress", env=env)
        assert r.returncode == 0, r.stderr
        assert "0 errors" in r.stdout
        run = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["run"]
        assert run["engine"].endswith(f"127.0.0.1:{port}/v1") and run["note"] is None


@pytest.mark.slow
def test_port_in_use_is_named(tiny_model_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = launcher.cpu_server_command(str(tiny_model_path), host="127.0.0.1", port=port, parallel=1)
        with launcher.ServerProcess(cmd, f"http://127.0.0.1:{port}") as server, pytest.raises(EngineError) as e:
            server.wait_ready(60)
    assert str(e.value).startswith("port in use") and "Address already in use" in str(e.value)


@pytest.mark.slow
def test_verify_hashes_smoke_and_agreement(tiny_model_path, tmp_path, capsys):
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(f"{sha256_file(tiny_model_path)}  {tiny_model_path.name}\n")
    assert read_manifest(manifest) == {tiny_model_path.name: sha256_file(tiny_model_path)}
    settings = tiny_settings(tmp_path, model=str(tiny_model_path))
    report = verify(settings, against=settings, model_path=tiny_model_path, manifest=manifest, rows=3)
    table = report.table()
    assert report.ok, table
    assert "agree risk level" in table and "3/3 = 100%" in table and "smoke" in table

    bad = tmp_path / "bad"
    bad.mkdir()
    data = bytearray(tiny_model_path.read_bytes())
    data[-100] ^= 0xFF  # corrupt one byte of the weights
    (bad / tiny_model_path.name).write_bytes(bytes(data))
    code = server_main(["verify", "--model", str(bad / tiny_model_path.name), "--manifest", str(manifest),
                        "--rows", "2"])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out and f"sha256 {tiny_model_path.name}" in out


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGINT", "SIGHUP"])  # Ctrl-C; a closing terminal
def test_serve_cli_prints_the_url_and_stops_on_ctrl_c(stop, tiny_model_path):
    import signal
    import time

    port = free_port()
    cmd = [sys.executable, "-m", "xladdin.server", "serve", "--engine", "cpu", "--model", str(tiny_model_path),
           "--port", str(port), "--parallel", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if line.startswith("ready:") or not line:
            break
    assert lines[-1].strip() == f"ready: export XLADDIN_ENGINE_URL=http://127.0.0.1:{port}/v1", lines
    assert lines[0].startswith("command: ") and "xladdin.server.cpu_server" in lines[0]
    proc.send_signal(getattr(signal, stop))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopped (exit code 0)" in out
    with socket.socket() as s:  # the port is free again: the child server is gone
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def long_answers(port: int, n: int, *, timeout: float) -> list:
    """``n`` threads each asking the CPU server on ``port`` for a long answer (the server busy answering);
    a server that goes away mid-answer ends a thread quietly, as it should."""
    import threading
    import urllib.request

    body = json.dumps({"messages": [{"role": "user", "content": "写一篇很长的文章"}], "max_tokens": 4000}).encode()

    def ask():
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=timeout).read()
        except OSError:
            pass

    load = [threading.Thread(target=ask, daemon=True) for _ in range(n)]
    for t in load:
        t.start()
    return load


@pytest.mark.slow
def test_the_cpu_server_under_load_stops_on_sigterm_before_the_kill_fallback(tiny_model_path):
    import threading

    port = free_port()
    cmd = launcher.cpu_server_command(str(tiny_model_path), host="127.0.0.1", port=port, parallel=2)
    server = launcher.ServerProcess(cmd, f"http://127.0.0.1:{port}")
    with server:
        server.wait_ready(120)
        load = long_answers(port, 4, timeout=60)
        threading.Event().wait(1.0)  # the requests reach the server and are being answered
        assert any(t.is_alive() for t in load)  # still answering: the server is under load when stopped
        code = server.stop(timeout=20)
    assert code == -15, (code, list(server.lines)[-5:])  # ended by SIGTERM itself; the SIGKILL fallback gives -9


@pytest.mark.slow
def test_a_busy_cpu_server_stops_at_once_not_after_the_interrupt_wait(tiny_model_path, monkeypatch):
    """``xladdin-server``'s stop of a CPU server busy answering: SIGTERM at once (its Python cannot
    run a Ctrl-C handler until the answers are done), never the wait for an orderly stop."""
    import threading
    import urllib.request

    monkeypatch.setattr(processes, "INTERRUPT_S", 600.0)  # were it waited for, the stop below would not end
    port = free_port()
    cmd = launcher.cpu_server_command(str(tiny_model_path), host="127.0.0.1", port=port, parallel=2)
    server = launcher.ServerProcess(cmd, f"http://127.0.0.1:{port}")
    try:
        server.wait_ready(120)
        long_answers(port, 2, timeout=120)

        def computing():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/slots", timeout=30) as resp:
                return any(s.get("is_processing") for s in json.loads(resp.read()))

        while not computing():  # the server is computing the answers
            threading.Event().wait(0.1)
        codes = []
        stopping = threading.Thread(target=lambda: codes.append(server.stop(timeout=600)), daemon=True)
        stopping.start()
        stopping.join(60)  # a generous bound: the orderly wait would be 600 s
        assert codes == [-15], (codes, list(server.lines)[-5:])
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


@pytest.mark.slow
def test_the_client_window_is_the_cpu_server_s_slots(tiny_model_path, tmp_path):
    port = free_port()
    cmd = launcher.cpu_server_command(str(tiny_model_path), host="127.0.0.1", port=port, parallel=3)
    with launcher.ServerProcess(cmd, f"http://127.0.0.1:{port}") as server:
        server.wait_ready(120)
        with Batcher.from_settings(tiny_settings(tmp_path, engine_url=f"http://127.0.0.1:{port}/v1")) as b:
            b.start()
            assert (b.engine.max_parallel, b.window.limit) == (3, 3)  # not 32 requests queued in a 3-slot server


@pytest.mark.parametrize("name", sorted(ALL))
def test_the_ray_vllm_processor_runs_a_profile_as_vllm_serve_does(name):
    """``engine_kwargs`` (ray.data.llm's vLLM engine arguments) is the profile's ``vllm serve`` command, less
    the server's own flags: each engine setting the same value under vLLM's argument name."""
    cmd = profiles.vllm_command(ALL[name], seed=7)
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    server_only = {"--served-model-name", "--host", "--port", "--default-chat-template-kwargs", "--api-server-count"}
    expected = {flag[2:].replace("-", "_"): json.loads(v) if v[:1] in "{[" else v
                for flag, v in args.items() if flag not in server_only}
    kwargs = profiles.engine_kwargs(ALL[name], seed=7)
    assert {k: v if isinstance(v, dict) else str(v) for k, v in kwargs.items()} == {
        k: v if isinstance(v, dict) else str(v) for k, v in expected.items()}

