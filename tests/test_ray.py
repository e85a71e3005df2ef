"""``xladdin screen --ray``: the job as a Ray Data pipeline on a local Ray instance of 2 CPUs, against a
real HTTP server on 127.0.0.1 that counts what it is asked. Skipped where Ray is not installed."""

import json
import os
import signal
import subprocess
import threading
import time

import pytest

pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'xladdin[ray]')")

from conftest import Server, vllm_models  # noqa: E402
from kit import cli_command, wait_until  # noqa: E402

from xladdin.cli.main import main  # noqa: E402
from xladdin.errors import ConfigError, InputError, InternalError  # noqa: E402
from xladdin.jobs.ray_job import RayOptions, check, dumps, loads, run_rows  # noqa: E402
from xladdin.settings import Settings  # noqa: E402
from xladdin.tasks.screen import ScreenResult, ScreenTask  # noqa: E402
from xladdin.testing import screen_answer, write_report_pdf  # noqa: E402


class Counting:
    """A chat-completions server answering one valid screen answer, one request at a time after
    ``delay`` seconds; ``asked`` holds the pool code each completion was for. With ``stop_after`` it
    answers that many and refuses the rest (503, not counted) until it is set to ``None``."""

    def __init__(self, delay: float = 0.0, stop_after: int | None = None, wrong_first: bool = False):
        self.asked: list[str] = []
        self.bodies: list[dict] = []
        self.stop_after = stop_after
        self._lock = threading.Lock()

        def chat(body):
            with self._lock:
                if self.stop_after is not None and len(self.asked) >= self.stop_after:
                    return 503, "application/json", b'{"error": {"message": "held for the test"}}'
                time.sleep(delay)
                text = json.dumps(body, ensure_ascii=False)
                code = next((c for c in CODES if f"公司{c}" in text), "?")
                first = code not in self.asked
                self.asked.append(code)
                self.bodies.append(body)
            # wrong_first: a code's first answer lacks the required reason (it does not validate)
            content = '{"risk": "高"}' if wrong_first and first else screen_answer()
            data = {"id": "c", "object": "chat.completion", "created": 0, "model": "qwen",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"completion_tokens": 5}}
            return 200, "application/json", json.dumps(data, ensure_ascii=False).encode()

        self.server = Server({"/v1/models": vllm_models("Qwen/Qwen3-8B", "qwen"), "/v1/chat/completions": chat})
        self.url = self.server.url

    def close(self):
        self.server.close()


CODES = [f"{600000 + i:06d}" for i in range(12)]


def make_pool(tmp_path, n: int, damaged: str | None = None):
    """A pool of ``n`` rows and a folder with a report PDF per code (``damaged``: a code whose file is no
    PDF), the last row without a report file."""
    reports = tmp_path / "reports"
    reports.mkdir()
    for i, code in enumerate(CODES[: n - 1]):
        if code == damaged:
            (reports / f"{code}_年报.pdf").write_bytes(b"not a pdf at all")
        else:
            write_report_pdf(reports / f"{code}_年报.pdf", i)
    lines = ["代码,名称,行业,市盈率TTM,ROE"] + [f"{c},公司{c},制造,20,{8 + i}" for i, c in enumerate(CODES[:n])]
    pool = tmp_path / "pool.csv"
    pool.write_text("\n".join(lines), encoding="utf-8")
    return pool, reports


def screen(pool, reports, out, url, cache, *extra):
    return main(["screen", str(pool), "--reports", str(reports), "-o", str(out), "--engine-url", url,
                 "--cache-dir", str(cache), "--no-progress", *extra])


def rows_of(path):
    return json.loads(path.read_text(encoding="utf-8"))["rows"]


def no_ray_left(session: int) -> list[str]:
    """Processes still running in the process session ``session`` (a job's own, started for it)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid=,stat=,comm="], capture_output=True, text=True).stdout
    fields = [line.split() for line in out.splitlines()]
    return [" ".join(f) for f in fields if f[1] == str(session) and not f[2].startswith("Z")]


@pytest.mark.slow
def test_the_ray_job_gives_the_report_of_xladdin_screen_on_the_same_rows(tmp_path):
    """The same pool (report PDFs, a damaged one, a row without a file) through ``xladdin screen`` and
    through ``--ray local``, each on an empty cache against the same two servers (``URL1,URL2``): every row
    of the two reports is the same (input, verdict and error columns), and the servers were asked as often
    by each."""
    pool, reports = make_pool(tmp_path, 6, damaged=CODES[3])
    servers = [Counting(), Counting()]
    urls = ",".join(s.url for s in servers)

    def asked():
        return sum(len(s.asked) for s in servers)

    try:
        assert screen(pool, reports, tmp_path / "one.json", urls, tmp_path / "cache-one") == 1  # a row failed
        asked_one = asked()
        assert screen(pool, reports, tmp_path / "ray.json", urls, tmp_path / "cache-ray",
                      "--ray", "local", "--ray-cpus", "2") == 1
        asked_ray = asked() - asked_one
        assert screen(pool, reports, tmp_path / "again.json", urls, tmp_path / "cache-ray",
                      "--ray", "local", "--ray-cpus", "2") == 1
        asked_again = asked() - asked_one - asked_ray
    finally:
        for server in servers:
            server.close()
    one, ray_rows = rows_of(tmp_path / "one.json"), rows_of(tmp_path / "ray.json")
    assert len(one) == len(ray_rows) == 6
    assert one == ray_rows
    assert "is not a PDF" in one[3]["错误 error"]
    assert [r["错误 error"] is None for r in one] == [True, True, True, False, True, True]
    assert asked_one == asked_ray == 5
    run = json.loads((tmp_path / "ray.json").read_text(encoding="utf-8"))["run"]
    assert run["engine_requests"] == 5 and run["files_read"] == 4 and run["rows"] == 6 and run["errors"] == 1
    again = json.loads((tmp_path / "again.json").read_text(encoding="utf-8"))["run"]  # on its cache: the
    assert asked_again == 0 and (again["files_read"], again["files_from_store"]) == (0, 4)  # texts kept too


@pytest.mark.slow
def test_the_ray_data_llm_pipeline_gives_the_report_of_xladdin_screen_and_asks_a_wrong_answer_again(tmp_path):
    """``--ray-engine llm-http``: the rows answered through ray.data.llm's processor (its HTTP one against
    a server on 127.0.0.1; on GPU nodes the vLLM one, ``ray_llm``), prepared, validated, audited and cached
    by the same code. Each code's first answer does not validate, so each row is asked once more with the
    fault in its messages, on one box and in the pipeline alike: the two reports are the same, row for row.
    Run again on its cache, the job asks nothing."""
    pool, reports = make_pool(tmp_path, 6, damaged=CODES[3])
    server = Counting(wrong_first=True)
    try:
        assert screen(pool, reports, tmp_path / "one.json", server.url, tmp_path / "cache-one") == 1
        asked_one = list(server.asked)
        server.asked.clear()
        ray_args = ("--ray", "local", "--ray-cpus", "2", "--ray-engine", "llm-http")
        assert screen(pool, reports, tmp_path / "ray.json", server.url, tmp_path / "cache-ray", *ray_args) == 1
        asked_ray, bodies = list(server.asked), list(server.bodies[len(asked_one):])
        assert screen(pool, reports, tmp_path / "again.json", server.url, tmp_path / "cache-ray", *ray_args) == 1
        asked_again = server.asked[len(asked_ray):]
    finally:
        server.close()
    one, ray_rows = rows_of(tmp_path / "one.json"), rows_of(tmp_path / "ray.json")
    assert len(one) == 6 and one == ray_rows
    assert "is not a PDF" in one[3]["错误 error"] and [r["错误 error"] is None for r in one].count(True) == 5
    answered = [c for i, c in enumerate(CODES[:6]) if i != 3]
    assert sorted(asked_ray) == sorted(asked_one) == sorted(answered * 2)  # each row asked twice
    again = [b for b in bodies if "这个回答不符合要求" in json.dumps(b, ensure_ascii=False)]
    assert len(again) == 5 and all(b["response_format"]["type"] == "json_schema" for b in bodies)
    run = json.loads((tmp_path / "ray.json").read_text(encoding="utf-8"))["run"]
    assert run["engine_requests"] == 10 and run["files_read"] == 4 and run["ray"]["engine"] == "llm-http"
    assert asked_again == [] and all(r["缓存命中 cached"] for r in rows_of(tmp_path / "again.json")
                                     if r["错误 error"] is None)
    again_run = json.loads((tmp_path / "again.json").read_text(encoding="utf-8"))["run"]
    assert (again_run["files_read"], again_run["files_from_store"]) == (0, 4)  # no file parsed twice


@pytest.mark.slow
def test_a_ray_job_killed_half_way_asks_again_only_the_rows_missing(tmp_path):
    """The job's process killed (SIGKILL) after a few answers; the same command again: the rows the
    cache holds are not asked, the server is asked for the others only, and the report is whole."""
    pool, reports = make_pool(tmp_path, 12)
    server = Counting(delay=0.4, stop_after=4)  # four answers, then none until the job is killed
    cache, out = tmp_path / "cache", tmp_path / "report.json"
    command = cli_command("screen", pool, "--reports", reports, "-o", out, "--engine-url", server.url, "--cache-dir",
                          cache, "--no-progress", "--ray", "local", "--ray-cpus", "2")
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    job = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(server.asked) >= 4 or job.poll() is not None, 240, message="no four answers asked")
        assert job.poll() is None, "the job ended before it was killed"
        assert len(server.asked) >= 4
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        wait_until(lambda: not no_ray_left(job.pid), 20, 0.2,  # the local Ray instance ends with its driver
                   message=lambda: f"the job's processes outlived it: {no_ray_left(job.pid)}")
        first = list(server.asked)
        assert len(set(first)) == 4 and not out.exists()
        server.stop_after = None
        asked_before = len(server.asked)
        assert screen(pool, reports, out, server.url, cache, "--ray", "local", "--ray-cpus", "2") == 0
        again = server.asked[asked_before:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        server.close()
    rows = rows_of(out)
    cached = {r["代码"] for r in rows if r["缓存命中 cached"]}
    assert len(rows) == 12 and all(r["错误 error"] is None for r in rows)
    assert cached and len(again) == 12 - len(cached)  # only the missing rows reached the server
    assert set(again) == set(CODES) - cached and len(set(again)) == len(again)
    assert cached <= set(first)  # what the cache held was answered by the killed job


class DiesWhenRead:
    """A row that kills the process that unpickles it (as a report file that crashes its reader would)."""

    def __reduce__(self):
        return os._exit, (1,)


@pytest.mark.slow
def test_a_worker_that_dies_loses_only_the_rows_of_its_read_task(tmp_path):
    rows = [{"code": c, "name": f"公司{c}", "roe": 10, "pe_ttm": 20} for c in CODES[:6]]
    rows[3] = DiesWhenRead()
    server = Counting()
    try:
        settings = Settings.load({"engine_url": server.url, "cache_dir": tmp_path / "cache"}, env={})
        results, counts = run_rows(rows, settings, ScreenTask(), RayOptions(cpus=2, read_batch=2))
    finally:
        server.close()
    lost = [i for i, r in enumerate(results) if isinstance(r, InternalError)]
    assert lost == [2, 3] and "died twice" in str(results[3])  # the read task of rows 2 and 3, retried once
    assert all(isinstance(results[i], ScreenResult) for i in (0, 1, 4, 5))
    assert counts["engine_requests"] == 4 == len(server.asked)


def test_the_vllm_processor_says_what_it_needs_and_the_embedded_engine_is_refused(tmp_path):
    with_server = Settings.load({"engine_url": "http://127.0.0.1:9/v1", "cache_dir": tmp_path}, env={})
    with pytest.raises(ConfigError, match="vLLM.*GPUs on the Ray nodes"):
        check(RayOptions(engine="vllm"), with_server)
    with pytest.raises(ConfigError, match="--engine-url"):
        check(RayOptions(), Settings.load({"cache_dir": tmp_path}, env={}))


def test_a_rows_error_crosses_between_ray_processes_as_it_was():
    error = loads(dumps(InputError("report_file", "600000_年报.pdf is not a PDF")))
    assert isinstance(error, InputError) and error.field == "report_file" and error.message.endswith("not a PDF")
    assert str(error) == "report_file 600000_年报.pdf is not a PDF"
