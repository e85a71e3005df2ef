"""What a user can trust, through the CLI: a config file as Windows writes it, a pool's PE columns that
are not PE-TTM, a loss stated for two years, messages that say what happened (the cache on a full disk,
how many rows the model answered, the command's time), a benchmark's quick run that leaves the
repository as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Server, vllm_models
from kit import run_cli, run_main

REFUSING = (400, "application/json", b'{"error": {"message": "maximum context length is 8192 tokens"}}')


def refusing_server() -> Server:
    """A server that refuses every request: each row gets the rules' and code's verdict (模型未作答)."""
    return Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": REFUSING})


def write_csv(path, header, rows):
    path.write_text("\n".join(",".join(map(str, r)) for r in [header, *rows]) + "\n", encoding="utf-8")
    return path


def cli(*args, env=None, drop=()):
    import os

    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in drop}
    return run_cli(*args, env=env)


# ------------------------------------------------------------------ a config file that is not UTF-8
@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_a_config_file_as_notepad_saves_it_is_read(encoding, tmp_path):
    config = tmp_path / "config.toml"
    wanted = tmp_path / "我的缓存"
    config.write_text(f'cache_dir = "{wanted.as_posix()}"\n', encoding=encoding)  # utf-16: with its BOM
    r = cli("cache", "stats", env={"XLADDIN_CONFIG": str(config)}, drop=("XLADDIN_CACHE_DIR",))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["directory"] == str(wanted)


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xd8",
                                     "cache_dir = 'x'".encode("gb18030") + "# 缓存".encode("gb18030"),
                                     "cache_dir = 'x'\n".encode("utf-16-le")])  # UTF-16 without its BOM
def test_a_config_file_that_is_not_text_is_one_line_naming_it_and_the_fix(content, tmp_path):
    config = tmp_path / "config.toml"
    config.write_bytes(content)
    r = cli("cache", "stats", env={"XLADDIN_CONFIG": str(config)})
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(config) in lines[0] and "save it as UTF-8" in lines[0]


def test_a_rules_file_not_in_utf8_is_named_or_read(tmp_path, monkeypatch, capsys):
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM"), [("600519", "贵州茅台", "30", "25")])
    rules = tmp_path / "rules.toml"
    rules.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF")  # a picture saved as rules.toml
    r = run_main(capsys, "screen", pool, "--rules", rules, "-o", tmp_path / "o.json")
    assert r.returncode == 2
    err = r.stderr
    assert f"rules file {rules}" in err and "UTF-8" in err and "Traceback" not in err
    rules.write_text("pe_limit = 20\n", encoding="utf-16")  # Notepad's "Unicode"
    server = refusing_server()
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        r = run_main(capsys, "screen", pool, "--rules", rules, "-o", tmp_path / "o.json", "--no-progress")
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    (row,) = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["rows"]
    assert row["风险等级 risk"] == "中" and "PE-TTM 25 > 20" in row["规则依据 rule basis"]


def screen_cli(tmp_path, monkeypatch, capsys, pool, *args):
    """``xladdin screen POOL -o out.json`` against a server that refuses every request; (exit, report, stdout,
    stderr)."""
    server = refusing_server()
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        r = run_main(capsys, "screen", pool, "-o", tmp_path / "out.json", "--no-progress", *args)
    finally:
        server.close()
    code, out, err = r.returncode, r.stdout, r.stderr
    report = json.loads((tmp_path / "out.json").read_text(encoding="utf-8")) if code in (0, 1) else None
    return code, report, out, err


# ------------------------------------------------------------------ PE columns that are not PE-TTM
@pytest.mark.parametrize("header, kind", [("市盈率(动)", "dynamic"), ("市盈率(静)", "static"), ("PE(LYR)", "static"),
                                          ("市盈率(LYR)", "static"), ("动态市盈率", "dynamic"),
                                          ("静态市盈率", "static")])
def test_a_pe_that_is_not_pe_ttm_is_not_read_as_it_and_said(header, kind, tmp_path, monkeypatch, capsys):
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", header), [("600519", "贵州茅台", "30", "10")])
    code, report, _, err = screen_cli(tmp_path, monkeypatch, capsys, pool)
    assert code == 0, err
    (row,) = report["rows"]
    assert row["风险等级 risk"] == "中" and "缺PE-TTM" in row["说明 notes"]  # not 低 on a PE that is no PE-TTM
    said = f"{header} (a {kind}"
    assert said in err and "not PE-TTM: not read" in err  # the CLI's unrecognised-columns line
    assert any(c.startswith(said) and "not PE-TTM" in c for c in report["run"]["columns_not_recognised"])
    assert row[header] == 10  # copied to the report as it is


def test_a_pe_ttm_beside_a_dynamic_pe_is_the_one_read(tmp_path, monkeypatch, capsys):
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率(动)", "市盈率TTM", "市盈率(静)"),
                     [("600519", "贵州茅台", "30", "80", "25", "90")])
    code, report, _, err = screen_cli(tmp_path, monkeypatch, capsys, pool)
    assert code == 0, err
    (row,) = report["rows"]
    assert row["风险等级 risk"] == "低" and "PE-TTM 25" in row["规则依据 rule basis"]
    assert report["run"]["columns_read"]["pe_ttm"] == "市盈率TTM"


# ------------------------------------------------------------------ two years of losses in prose
def test_losses_stated_for_this_year_and_last_are_high_risk_and_a_positive_pe_doubtful(tmp_path, monkeypatch,
                                                                                       capsys):
    text = "2023年公司实现营业收入15.2亿元，归属于上市公司股东的净利润-1.2亿元，上年同期净利润-0.8亿元。"
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"),
                     [("600001", "某公司", "20", "10", text)])
    code, report, _, err = screen_cli(tmp_path, monkeypatch, capsys, pool)
    assert code == 0, err
    (row,) = report["rows"]
    assert row["风险等级 risk"] == "高" and "连续两年亏损" in row["规则依据 rule basis"]  # was 低 100
    assert row["上年净利润(亿元) prior-year profit"] == -0.8 and row["净利润(亿元) net profit"] == -1.2
    assert "上年净利润「归属于上市公司股东的净利润-1.2亿元，上年同期净利润-0.8亿元」" in row["出处 evidence"]
    assert {"亏损", "数据存疑"} <= set(row["标记 flags"].split(",")), row["标记 flags"]
    assert "PE-TTM 10为正, 但文本报告亏损" in row["说明 notes"] and "ROE 20%为正" in row["说明 notes"]


@pytest.mark.parametrize("text, quote", [
    ("2023年亏损1.2亿元，2022年亏损0.8亿元。", "2022年亏损0.8亿元"),
    ("2023年净利润为-1.2亿元，2022年净利润为-0.8亿元。", "2022年净利润为-0.8亿元"),
    ("公司2023年实现净利润-1.2亿元，2022年为-0.8亿元。", "2022年为-0.8亿元"),
])
def test_a_loss_stated_under_its_year_is_read_for_that_year(text, quote, tmp_path, monkeypatch, capsys):
    """Last year's loss named by its year, beside this year's: 高 连续两年亏损 (it was 低 100: the year
    before's figure was not read) (issue 47 item 8)."""
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "财报摘要"), [("600001", "某公司", text)])
    code, report, _, err = screen_cli(tmp_path, monkeypatch, capsys, pool)
    assert code == 0, err
    (row,) = report["rows"]
    assert row["净利润(亿元) net profit"] == -1.2 and row["上年净利润(亿元) prior-year profit"] == -0.8, row
    assert row["风险等级 risk"] == "高" and "连续两年亏损" in row["规则依据 rule basis"], row["规则依据 rule basis"]
    assert f"上年净利润「{quote}」" in row["出处 evidence"]


def test_a_figure_under_another_year_or_of_another_kind_is_not_last_year_s_profit(tmp_path, monkeypatch, capsys):
    text = "2023年净利润为-1.2亿元，2022年营业收入为30亿元，2021年亏损0.8亿元。"
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "财报摘要"), [("600001", "某公司", text)])
    code, report, _, err = screen_cli(tmp_path, monkeypatch, capsys, pool)
    (row,) = report["rows"]
    assert code == 0 and row["上年净利润(亿元) prior-year profit"] is None, row


# ------------------------------------------------------------------ the summary line: answered rows, wall time
def answering_server(refuse: str | None = None) -> Server:
    """A server answering every screen request validly, except those whose row holds ``refuse``."""
    from xladdin.testing import screen_answer

    def chat(body):
        if refuse and refuse in json.dumps(body, ensure_ascii=False):
            return REFUSING
        data = {"id": "c", "object": "chat.completion", "created": 0, "model": "qwen",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": screen_answer()}}]}
        return 200, "application/json", json.dumps(data, ensure_ascii=False).encode()

    return Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": chat})


POOL_ROWS = [("600519", "贵州茅台", "30", "25", "营业收入1505.60亿元，归母净利润747.34亿元"),
             ("000001", "平安银行", "11", "5", "营业收入1646.99亿元，净利润464.55亿元")]
POOL_HEADER = ("代码", "名称", "ROE", "市盈率TTM", "财报摘要")


def test_highlights_says_how_many_rows_the_model_answered(tmp_path, monkeypatch, capsys):
    pool = write_csv(tmp_path / "pool.csv", POOL_HEADER, POOL_ROWS)
    server = refusing_server()  # every row's highlights written by code (as after a timeout)
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        r = run_main(capsys, "highlights", pool, "-o", tmp_path / "h.json", "--no-progress")
    finally:
        server.close()
    out = r.stdout
    assert r.returncode == 0
    assert "2 without a model answer" in out and "the model answered 0 of 2" in out, out
    run = json.loads((tmp_path / "h.json").read_text(encoding="utf-8"))["run"]
    assert run["without_answer"] == 2


def test_screen_says_how_many_rows_the_model_answered_and_the_command_s_time(tmp_path, monkeypatch, capsys):
    import re
    import time

    from xladdin.jobs import pool_screen

    pool = write_csv(tmp_path / "pool.csv", POOL_HEADER, POOL_ROWS)
    real, facts = pool_screen.write_report, {}

    def slow_writer(*args, **kwargs):  # a step after the rows (as writing a large report) takes its time
        facts["rows_seconds"] = args[4]["seconds"]
        began = time.perf_counter()
        time.sleep(0.5)
        out = real(*args, **kwargs)
        facts["writing"] = time.perf_counter() - began
        return out

    monkeypatch.setattr(pool_screen, "write_report", slow_writer)
    server = answering_server(refuse="平安银行")
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        r = run_main(capsys, "screen", pool, "-o", tmp_path / "o.json", "--no-progress")
    finally:
        server.close()
    out = r.stdout
    assert r.returncode == 0, (out, json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["rows"])
    assert "1 without a model answer (flag 模型未作答)" in out and "the model answered 1 of 2" in out, out
    shown = float(re.search(r"([0-9.]+)s \(", out).group(1))
    # the command's time holds the rows and the report's writing (not the rows' alone); shown to 0.1 s
    assert shown + 0.05 >= facts["rows_seconds"] + facts["writing"], (out, facts)


# ------------------------------------------------------------------ a full disk: what the cache holds, truly
@pytest.mark.parametrize("cache", ["off", "unusable", "writes fail", "works"])
def test_a_report_on_a_full_disk_says_truly_what_the_cache_holds(cache, tmp_path, monkeypatch, capsys):
    import diskcache

    from xladdin.jobs import report

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "_write", full_disk)  # neither the report nor its rescue can be written
    args = []
    if cache == "off":
        args = ["--no-cache"]
    elif cache == "unusable":
        (tmp_path / "afile").write_text("x")
        args = ["--cache-dir", str(tmp_path / "afile" / "cache")]
    elif cache == "writes fail":
        real = diskcache.Cache.set

        def set_fails(self, key, *a, **kw):
            if len(str(key)) == 64:  # an answer (its key a sha256); the side store still works
                raise OSError(28, "No space left on device")
            return real(self, key, *a, **kw)

        monkeypatch.setattr(diskcache.Cache, "set", set_fails)
    pool = write_csv(tmp_path / "pool.csv", POOL_HEADER, POOL_ROWS)
    server = answering_server()
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        r = run_main(capsys, "screen", pool, "-o", tmp_path / "o.xlsx", "--no-progress", *args)
    finally:
        server.close()
    err = r.stderr
    assert r.returncode == 2 and "No space left on device" in err, err
    if cache == "works":
        assert "the model's answers (2 rows) are in the cache" in err
    else:
        assert "every answer is in the cache" not in err and "are in the cache" not in err, err
        said = {"off": "no answer is in the cache (the cache is off (--no-cache))",
                "unusable": "no answer is in the cache (cache disabled: cannot use",
                "writes fail": "2 of the model's answers could not be stored in the cache"}[cache]
        assert said in err, err


# ------------------------------------------------------------------ the quick benchmark of docs/testing.md
def test_a_quick_benchmark_run_never_writes_the_committed_results(tmp_path, monkeypatch, capsys):
    """``python -m bench --quick`` as docs/testing.md gives it (no --scratch): the committed results and page
    (here stand-ins) are left as they are; where the run wrote is said."""
    from types import SimpleNamespace

    import bench.__main__ as bench_main
    from bench import suite

    committed, page = tmp_path / "results", tmp_path / "BENCHMARKS.md"
    committed.mkdir()
    (committed / "whole_pool.json").write_text('{"kept": true}', encoding="utf-8")
    page.write_text("the committed page", encoding="utf-8")
    monkeypatch.setattr(bench_main, "RESULTS", committed)
    monkeypatch.setattr(bench_main, "DOC", page)
    monkeypatch.setattr("bench.common.RESULTS", committed)
    engine = SimpleNamespace(model_id="tiny@0", close=lambda: None)
    monkeypatch.setattr(bench_main, "make_env", lambda model, parallel: SimpleNamespace(
        engine=engine, model_label="tiny", settings=SimpleNamespace(embedded=SimpleNamespace(n_threads=2))))
    for name in ("batched_vs_per_cell", "cached_recalc", "memory", "stack_overhead", "whole_pool"):
        monkeypatch.setattr(suite, name, lambda *a, n=name: {"ran": n})
    monkeypatch.setattr(bench_main, "render", lambda *a: "a quick page")
    monkeypatch.setattr("sys.argv", ["python -m bench", "--quick"])
    bench_main.main()
    out = capsys.readouterr().out
    assert (committed / "whole_pool.json").read_text(encoding="utf-8") == '{"kept": true}'
    assert sorted(p.name for p in committed.iterdir()) == ["whole_pool.json"]
    assert page.read_text(encoding="utf-8") == "the committed page"
    scratch = out.split("results go to ")[1].split(" ")[0]
    saved = json.loads((Path(scratch) / "whole_pool.json").read_text(encoding="utf-8"))
    assert saved["bench"] == "whole_pool" and saved["runs"][-1]["ran"] == "whole_pool"
    assert (Path(scratch) / "BENCHMARKS.md").read_text(encoding="utf-8") == "a quick page"


def test_the_quick_benchmarks_batchers_are_built_as_the_core_builds_them(tmp_path):
    """The benchmark suite's own batchers take the core's arguments (a part stubbed out above cannot say so)."""
    from types import SimpleNamespace

    from bench import suite
    from xladdin.settings import Settings
    from xladdin.testing import ScriptedEngine, screen_answer

    env = SimpleNamespace(engine=ScriptedEngine(lambda _: screen_answer(), max_parallel=3),
                          settings=Settings.load({"cache_dir": str(tmp_path)}, env={}))
    with suite._no_cache_batcher(env) as b:
        b.start()
        assert b.window.limit == 3 and not b.cache.enabled


@pytest.mark.parametrize("sdk", [False, True])
def test_the_client_benchmark_s_http_arms_run_against_a_stand_in_server(sdk):
    """``python -m bench client``'s two HTTP clients (aiohttp as shipped, the OpenAI SDK over httpx as
    before) answer every row of a small table (no timings asserted): the arm that overrides the engine's
    transport keeps to its signature."""
    from bench import client

    run = client.http_table(40, seed=3, in_flight=8, sdk=sdk, delays=(0.0, 0.01))
    assert run["rows"] == 40 and run["errors"] == 0, run


def test_the_benchmarks_page_is_what_the_committed_results_say():
    """docs/BENCHMARKS.md is rendered from bench/results (``python -m bench --render-only``): a page edited by
    hand (a session's findings written into the page, not into its results file) is lost at the next run."""
    import bench.__main__ as bench_main

    assert bench_main.render_saved() == bench_main.DOC.read_text(encoding="utf-8")


def test_a_benchmark_run_again_is_appended_and_the_page_names_the_run_before(tmp_path, monkeypatch):
    """Every results file holds its runs (``{"bench": NAME, "runs": [...]}``, the last ``KEPT_RUNS``): a
    benchmark run again is appended, and its section shows the newest run with one line for each earlier
    one (its date and headline numbers); the GPU section shows every run."""
    import shutil

    import bench.__main__ as bench_main
    from bench import common

    results = tmp_path / "results"
    shutil.copytree(common.RESULTS, results)
    monkeypatch.setattr(bench_main, "RESULTS", results)
    before = common.latest(results / "cells.json")
    common.write_run(results / "cells.json", {**before, "when": "2099-01-01", "cli_over_browser": 0.123})
    saved = common.read_runs(results / "cells.json")
    assert saved[-1]["cli_over_browser"] == 0.123 and saved[-2] == before
    page = bench_main.render_saved()
    section = page[page.index("## 16."):]
    assert "**0.123**" in section
    earlier = (f"Earlier runs (`bench/results`): {before.get('when', 'date not recorded')}: cli_over_browser "
               f"{before['cli_over_browser']}")  # the newest earlier run first, then the others after a ';'
    assert any(earlier + end in section for end in (".", ";", " ("))  # (its note, where it has one)
    for i in range(common.KEPT_RUNS + 2):
        common.write_run(results / "ramp.json", {"in_flight": i})
    assert [r["in_flight"] for r in common.read_runs(results / "ramp.json")] == list(range(2, common.KEPT_RUNS + 2))


@pytest.mark.parametrize("env, rules, named", [
    ({"XLADDIN_TIMEOUT": "1e400"}, None, "setting timeout: Input should be a finite number"),
    ({"XLADDIN_TIMEOUT": "1e300"}, None, "setting timeout: Input should be less than or equal to 86400"),
    ({"XLADDIN_TEMPERATURE": "inf"}, None, "setting temperature: Input should be a finite number"),
    ({"XLADDIN_MAX_REPORT_MIB": "nan"}, None, "setting max_report_mib: Input should be a finite number"),
    ({}, "score_base = 1e308", "score_base: Input should be less than or equal to 1000"),
    ({}, "roe_weight = inf", "roe_weight: Input should be a finite number"),
    ({}, "roe_target = -1e300", "roe_target: Input should be greater than or equal to -1000"),
])
def test_a_setting_or_rule_out_of_its_bounds_is_refused_naming_it(env, rules, named, tmp_path):
    """Every setting and rule finite and within a range that means something, checked when loaded: exit 2
    naming the key and its bound, never a traceback nor an internal error on every row (issue 47 item 4)."""
    import os

    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,ROE,市盈率TTM\n600519,贵州茅台,30,25\n", encoding="utf-8")
    args = ["screen", pool, "-o", tmp_path / "out.json", "--no-progress"]
    if rules is not None:
        (tmp_path / "rules.toml").write_text(rules + "\n", encoding="utf-8")
        args += ["--rules", tmp_path / "rules.toml"]
    r = run_cli(*args, env={**os.environ, **env})
    assert r.returncode == 2 and named in r.stderr, r.stderr[-1500:]
    assert "Traceback" not in r.stderr and not (tmp_path / "out.json").exists()


def test_a_one_line_report_text_ending_in_pdf_is_text_not_a_path(tiny_model_path, tmp_path):
    """A 财报摘要 of one line that ends in ``.pdf`` (a web address of the report) is the row's text, not a
    file to open: the row is screened, not lost to "file not found" (issue 47 item 7); a file's name or
    full path in the same column is still a report file."""
    from test_documents import cli

    (tmp_path / "600000_年报.txt").write_text("营业收入100亿元，归属于上市公司股东的净利润10亿元。", encoding="utf-8")
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,ROE,市盈率TTM,财报摘要\n"
                    "600519,贵州茅台,30,25,年报全文见 www.cninfo.com.cn/600519.pdf\n"
                    "600000,浦发银行,8,5,600000_年报.txt\n", encoding="utf-8")
    r = cli(["screen", str(pool), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    text_row, file_row = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    assert not text_row.get("error") and "file" not in json.dumps(text_row, ensure_ascii=False).lower(), text_row
    assert file_row["营收(亿元) revenue"] == 100.0  # read from the file


def test_a_pool_in_the_home_folder_reads_no_file_below_it_unless_chosen(tiny_model_path, tmp_path):
    """``cd ~`` with a pool whose 报告文件 names ``Documents/passwords.txt`` and ``.config/app/notes.md``:
    neither is read (the home folder is no report folder unless chosen), each row's error names the file
    and how to allow its folder; a folder chosen with ``--reports`` is read, but never a hidden folder in
    it (issue 47 item 1)."""
    import os

    from test_documents import cli

    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (home / ".config" / "app").mkdir(parents=True)
    (home / "Documents" / "passwords.txt").write_text("营业收入100亿元。密码 hunter2", encoding="utf-8")
    (home / ".config" / "app" / "notes.md").write_text("营业收入200亿元。token abc123", encoding="utf-8")
    pool = home / "pool.csv"
    pool.write_text("代码,名称,ROE,市盈率TTM,报告文件\n600519,贵州茅台,30,25,Documents/passwords.txt\n"
                    "600000,浦发银行,8,5,.config/app/notes.md\n", encoding="utf-8")
    env = {"HOME": str(home), "USERPROFILE": str(home)}
    r = cli(["screen", str(pool), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path, **env)
    written = (tmp_path / "out.json").read_text(encoding="utf-8") + r.stdout + r.stderr
    assert r.returncode == 1 and "hunter2" not in written and "abc123" not in written, written[-2000:]
    first, second = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    error = first["错误 error"]
    assert "passwords.txt" in error and "home folder" in error and "--reports" in error, error
    assert "notes.md" in second["错误 error"]
    # chosen: the Documents folder is read; a hidden folder below a chosen one never is
    (home / "Documents" / ".private").mkdir()
    (home / "Documents" / ".private" / "x.txt").write_text("营业收入300亿元。", encoding="utf-8")
    pool.write_text("代码,名称,ROE,市盈率TTM,报告文件\n600519,贵州茅台,30,25,Documents/passwords.txt\n"
                    "600000,浦发银行,8,5,Documents/.private/x.txt\n", encoding="utf-8")
    r = cli(["screen", str(pool), "--reports", str(home / "Documents"), "-o", str(tmp_path / "out2.json")],
            tiny_model_path, tmp_path, **env)
    chosen, hidden = json.loads((tmp_path / "out2.json").read_text(encoding="utf-8"))["rows"]
    assert chosen["营收(亿元) revenue"] == 100.0 and not chosen["错误 error"], chosen
    assert "hidden folder" in hidden["错误 error"], hidden
    assert os.path.isdir(home / ".config")  # nothing of the user's was touched


def test_the_cache_opens_and_clears_only_a_folder_of_its_own(tmp_path):
    """A folder holding another program's SQLite ``cache.db`` (or a user's file of that name): ``cache
    stats`` and ``cache clear`` refuse it naming the folder, and nothing in it changes (no table added, no
    folder made, nothing removed); ``stats`` of a folder that is not there makes none; a cache xladdin made
    is marked and cleared as before (issue 47 item 3)."""
    import hashlib
    import sqlite3

    other = tmp_path / "other-app"
    other.mkdir()
    with sqlite3.connect(other / "cache.db") as db:
        db.execute("CREATE TABLE notes (t TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "cache.db").write_text("my own file that happens to be called cache.db", encoding="utf-8")

    def state(folder):
        return sorted((p.relative_to(folder).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
                      for p in folder.rglob("*") if p.is_file())

    for folder in (other, mine):
        before = state(folder)
        for action in ("stats", "clear"):
            r = run_cli("cache", action, "--cache-dir", folder)
            assert r.returncode == 2 and f"{folder} holds a cache.db xladdin did not make" in r.stderr, r
            assert state(folder) == before and not [p for p in folder.iterdir() if p.is_dir()]
    with sqlite3.connect(other / "cache.db") as db:
        assert [t for (t,) in db.execute("SELECT name FROM sqlite_master")] == ["notes"]

    absent = tmp_path / "absent"
    r = run_cli("cache", "stats", "--cache-dir", absent)
    assert r.returncode == 0 and json.loads(r.stdout)["entries"] == 0 and not absent.exists()

    from xladdin.core.cache import MARKER, Cache

    ours = Cache(tmp_path / "ours")
    ours.set("k", {"answer": "x"})
    ours.close()
    assert (tmp_path / "ours" / MARKER).is_file()
    r = run_cli("cache", "clear", "--cache-dir", tmp_path / "ours")
    assert r.returncode == 0 and "removed 1 entries" in r.stdout, r


def bomb_pdf(path, mib: int) -> None:
    """A small PDF whose one page's content stream inflates to ``mib`` MiB of zeros (a decompression bomb)."""
    import zlib

    z = zlib.compressobj(1)
    data = b"".join(z.compress(b"\0" * (1 << 20)) for _ in range(mib)) + z.flush()
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, obj in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    path.write_bytes(bytes(out))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="the reader's memory bound is POSIX's RLIMIT_AS")
def test_a_decompression_bomb_is_its_row_s_error_bounded_in_memory(tiny_model_path, tmp_path):
    """A PDF of a few MiB that inflates to 1 GiB, beside a real report: with reader_memory_mib=256 its
    reader stops at that bound, the row's error names the file and the setting, the other row is read
    (issue 47 item 2: it took a reader to 9.6 GB for 120 s)."""
    from test_documents import PAGE_1, PAGE_2, cli, make_pdf

    bomb_pdf(tmp_path / "600001_年报.pdf", 1024)
    make_pdf(tmp_path / "688001_年报.pdf", [PAGE_1, PAGE_2])
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,ROE,市盈率TTM,报告文件\n600001,某公司,10,20,600001_年报.pdf\n"
                    "688001,华兴源创,10,20,688001_年报.pdf\n", encoding="utf-8")
    r = cli(["screen", str(pool), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path,
            XLADDIN_READER_MEMORY_MIB="256")
    assert r.returncode == 1, r.stderr[-2000:]
    bomb, report = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    assert "600001_年报.pdf" in bomb["错误 error"] and "reader_memory_mib" in bomb["错误 error"], bomb["错误 error"]
    assert not report["错误 error"] and report["营收(亿元) revenue"] is not None, report
