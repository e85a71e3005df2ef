"""Report files at scale: each file read once (a rerun opens none), in reader processes, never on a
cell's thread; a file that hangs or crashes its reader is its row's error, and the other rows go on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit import cli_command, recalculates, run_cli, wait_until
from test_documents import PAGE_1, PAGE_2, TINY_MAX_TOKENS, make_pdf, write_pool
from test_user_paths import MISSING, _answering_server, windows_udfs  # noqa: F401  (the fixture)

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.readers import Reader
from xladdin.reading import documents
from xladdin.testing import ScriptedEngine, misbehaving_read, screen_answer

BOUND_S = 120.0  # generous: what is waited on is a condition, never a duration


def distinct_pdfs(folder: Path, codes: list[str]) -> list[Path]:
    """One PDF per code, each a different file (its code in its first line), named as --reports matches."""
    folder.mkdir(parents=True, exist_ok=True)
    return [make_pdf(folder / f"{code}_年报.pdf", [[f"证券代码：{code}", *PAGE_1], PAGE_2]) for code in codes]


def run_facts(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["run"]


def cli(args, model_path, tmp_path, **kw):
    env = dict(os.environ, XLADDIN_MODEL=str(model_path), XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS),
               XLADDIN_CACHE_DIR=str(tmp_path / "cache"))
    return run_cli(*args, env=env, timeout=600, **kw)


@pytest.mark.slow
def test_a_pool_of_report_files_reads_each_file_once_and_a_rerun_opens_none(tiny_model_path, tmp_path):
    codes = [f"6880{i:02d}" for i in range(8)]
    distinct_pdfs(tmp_path / "reports", codes)
    rows = [[c, f"公司{i}", "设备", "-40", ""] for i, c in enumerate(codes)] + [[codes[0], "同一份", "设备", "-40", ""]]
    pool = write_pool(tmp_path / "pool.csv", rows, header=("代码", "名称", "行业", "市盈率TTM", "ROE"))
    first = cli(["screen", str(pool), "--reports", str(tmp_path / "reports"), "-o", str(tmp_path / "a.json")],
                tiny_model_path, tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    facts = run_facts(tmp_path / "a.json")
    assert facts["files_read"] == 8 and facts["files_from_store"] == 0  # nine rows, eight files: each read once
    rows_a = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))["rows"]
    assert all(r["错误 error"] is None and r["风险等级 risk"] == "高" for r in rows_a)

    again = cli(["screen", str(pool), "--reports", str(tmp_path / "reports"), "-o", str(tmp_path / "b.json")],
                tiny_model_path, tmp_path)
    assert again.returncode == 0 and "9 rows, 9 from cache" in again.stdout, again.stderr[-2000:]
    facts = run_facts(tmp_path / "b.json")
    # no file parsed again, no text loaded: each row's result kept by its input (the file by its stamp)
    assert (facts["files_read"], facts["files_from_store"], facts["results_recalled"]) == (0, 0, 9)
    rows_b = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))["rows"]
    assert [r["净利润(亿元) net profit"] for r in rows_b] == [r["净利润(亿元) net profit"] for r in rows_a]

    # a file changed since (same name, other content): read again, and only that one
    make_pdf(tmp_path / "reports" / f"{codes[1]}_年报.pdf", [[f"证券代码：{codes[1]}", "更正后"], *([PAGE_1, PAGE_2])])
    third = cli(["screen", str(pool), "--reports", str(tmp_path / "reports"), "-o", str(tmp_path / "c.json")],
                tiny_model_path, tmp_path)
    assert third.returncode == 0, third.stderr[-2000:]
    facts = run_facts(tmp_path / "c.json")
    assert (facts["files_read"], facts["results_recalled"]) == (1, 8)  # the eight rows of unchanged files
    rows_c = json.loads((tmp_path / "c.json").read_text(encoding="utf-8"))["rows"]
    assert [r["缓存命中 cached"] for r in rows_c] == [i != 1 for i in range(9)]  # the changed file's row asked


def test_qwen_screen_with_a_report_path_reads_it_off_the_calling_thread(windows_udfs, tmp_path,  # noqa: F811
                                                                        monkeypatch):
    from xladdin.sheet import functions
    from xladdin.sheet.functions import CellRuntime

    call_udf, name, module = windows_udfs
    distinct_pdfs(tmp_path, ["688001"])

    def opened_here(*args):  # a file opened in this process (the calling thread included) fails the test
        raise AssertionError(f"a report file was opened on the calling side: {args}")

    monkeypatch.setattr(documents, "read_document", opened_here)  # the ways this process reads a file
    monkeypatch.setattr(documents, "_read", opened_here)
    # and code's readings of the text come with it from the reader process: none is made here
    from xladdin.reading import figures, tables

    monkeypatch.setattr(figures, "_first_money", opened_here)
    monkeypatch.setattr(tables, "_Reader", opened_here)
    engine = ScriptedEngine(lambda m: screen_answer("亏损扩大"), delay=0.05)
    recalculated = []
    batcher = Batcher(engine, Cache(tmp_path / "c"), window_ms=0)
    runtime = CellRuntime(batcher=batcher, told=recalculates(recalculated.append))
    module.set_runtime(runtime)
    book = str(tmp_path / "pool.xlsx")  # a saved workbook beside the report
    row = ((688001.0, "华兴源创", "设备", -40.0, None, None, "688001_年报.pdf", None, None, None),)
    first = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, {"address": "$L$2", "book": book})
    assert first[0][0] == functions.PENDING  # not read yet: pending like any other cell
    wait_until(lambda: recalculated, BOUND_S, message="the cell was never recalculated")
    done = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, {"address": "$L$2", "book": book})
    out = dict(zip(functions.SPILL_FIELDS, done[0], strict=True))
    assert out["risk_level"] == "高" and out["net_profit"] == pytest.approx(-0.31204) and "688001" in out["read"]
    again = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, {"address": "$L$2", "book": book})
    assert again == done and batcher.reader.snapshot()["files_read"] == 1 and len(engine.calls) == 1


@pytest.mark.slow
def test_a_file_that_hangs_or_crashes_its_reader_is_its_rows_error_and_the_others_go_on(tmp_path):
    import pandas as pd

    import xladdin

    names = ["600001_ok.txt", "600002_hang.txt", "600003_crash.txt", "600004_ok.txt"]
    for n in names:
        (tmp_path / n).write_text("营业收入12.5亿元，同比增长8%。", encoding="utf-8")
    df = pd.DataFrame({"代码": [n[:6] for n in names], "名称": list("甲乙丙丁"), "报告文件": names})
    with Batcher(ScriptedEngine(lambda _: screen_answer("稳健")), Cache(tmp_path / "c")) as b:
        b.reader = Reader(b.cache, processes=2, timeout=5.0, read=misbehaving_read)
        cwd = Path.cwd()
        os.chdir(tmp_path)  # a DataFrame's relative paths: from the current folder
        try:
            out = xladdin.screen(df, batcher=b, progress=False)
        finally:
            os.chdir(cwd)
    errors = list(out["错误 error"])
    assert pd.isna(errors[0]) and pd.isna(errors[3]) and list(out["营收(亿元) revenue"])[::3] == [12.5, 12.5]
    assert "600002_hang.txt" in errors[1] and "longer than 5s" in errors[1]
    assert "600003_crash.txt" in errors[2] and "crashed the report reader" in errors[2]


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_a_run_stopped_while_reading_leaves_no_reader(tiny_model_path, tmp_path, stop):
    """Ctrl-C: exit 130 and the readers ended; killed outright (SIGKILL, nothing of the run's code runs):
    readers hung in a read end with it too (the kernel's parent-death signal, else their watcher)."""
    for i in range(60):
        (tmp_path / f"6000{i:02d}_hang.txt").write_text("营业收入12.5亿元。", encoding="utf-8")
    pool = write_pool(tmp_path / "pool.csv", [[f"6000{i:02d}", f"公司{i}", "设备", "20", "10"] for i in range(60)],
                      header=("代码", "名称", "行业", "市盈率TTM", "ROE"))
    # every file hangs its reader: the run is still reading when it is interrupted
    code = ("import sys, xladdin.core.readers as r, xladdin.testing as t; "
            "r.Reader.__init__.__kwdefaults__['read'] = t.misbehaving_read; "
            "from xladdin.cli.main import main; sys.exit(main(sys.argv[1:]))")
    env = dict(os.environ, XLADDIN_MODEL=str(tiny_model_path), XLADDIN_CACHE_DIR=str(tmp_path / "cache"),
               XLADDIN_READERS="2")
    proc = subprocess.Popen([sys.executable, "-c", code, "screen", str(pool), "--reports", str(tmp_path), "-o",
                             str(tmp_path / "out.json"), "--no-progress"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + BOUND_S  # one bound for the readers to start and to hang

        def readers() -> tuple[set[int]] | None:  # its two reader processes, or the run has ended
            found = _descendants(proc.pid)
            return (found,) if len(found) >= 2 or proc.poll() is not None else None

        (everything,) = wait_until(readers, BOUND_S, 0.1, message="no reader processes started")
        assert proc.poll() is None and len(everything) >= 2, "no reader processes started"
        wait_until(lambda: len(list(tmp_path.glob("*.hanging"))) >= 2, deadline - time.monotonic(), 0.1,
                   message="the two readers never hung in a read")
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=BOUND_S)
        assert proc.returncode == (130 if stop == signal.SIGINT else -signal.SIGKILL), err[-2000:]
        wait_until(lambda: not any(_alive(p) for p in everything), BOUND_S, 0.1,
                   message=lambda: f"a reader process outlived the run: {[p for p in everything if _alive(p)]}")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_plain_script_that_screens_report_files_at_its_top_level(tiny_model_path, tmp_path):
    """A user's script without ``if __name__ == "__main__"``: its readers must not run it again."""
    distinct_pdfs(tmp_path / "reports", ["688001", "688002"])
    script = tmp_path / "screen.py"
    script.write_text(
        "import pandas as pd, xladdin\n"
        "df = pd.DataFrame({'代码': ['688001', '688002'], '名称': ['甲', '乙']})\n"
        f"out = xladdin.screen(df, reports={str(tmp_path / 'reports')!r}, progress=False)\n"
        "print('RESULT', list(out['风险等级 risk']), list(out['错误 error'].isna()))\n", encoding="utf-8")
    env = dict(os.environ, XLADDIN_MODEL=str(tiny_model_path), XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS),
               XLADDIN_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("RESULT") == 1 and "RESULT ['高', '高'] [True, True]" in r.stdout, r.stdout


def test_a_damaged_or_encrypted_file_read_by_a_reader_is_its_rows_error_as_it_is(tiny_model_path, tmp_path):
    """The reader's own errors reach the row as they are (naming the file and what is wrong), not as a
    crashed reader."""
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "600001_年报.pdf").write_bytes(b"not a pdf at all")
    make_pdf(reports / "600002_年报.pdf", [PAGE_1], encrypt="secret")
    (reports / "600003_年报.txt").write_bytes(b"\xff\xfe\x00\xd8")  # no text in any encoding
    rows = [[code, name, "设备", "20", "10"] for code, name in (("600001", "甲"), ("600002", "乙"), ("600003", "丙"))]
    pool = write_pool(tmp_path / "pool.csv", rows, header=("代码", "名称", "行业", "市盈率TTM", "ROE"))
    r = cli(["screen", str(pool), "--reports", str(reports), "-o", str(tmp_path / "out.json"), "--no-progress"],
            tiny_model_path, tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    errors = [row["错误 error"] for row in json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]]
    assert "600001_年报.pdf is not a PDF" in errors[0]
    assert "600002_年报.pdf is encrypted" in errors[1]
    assert "600003_年报.txt" in errors[2] and "crashed" not in " ".join(errors)


def test_the_notes_to_the_statements_are_not_read_and_nothing_read_is_lost(tiny_model_path, tmp_path):
    """An annual report's 财务报表附注 (about half its pages) are left out: read after the auditor's report and the
    合并利润表, they end the reading; the figures code reads stand before them."""
    from test_layouts import STATEMENT  # a 合并利润表 as code reads its revenue and cost

    from xladdin.reading.documents import read_document
    from xladdin.testing import write_pdf

    statement = [*STATEMENT, "四、利润总额 300,000.00 200,000.00", "五、净利润 250,000.00 170,000.00"]
    pages = [["2023年年度报告", "公司基本情况简介"],  # the front matter's 公司基本情况 ends nothing
             [*PAGE_1], [*PAGE_2], ["第十节 财务报告", "一、审计报告", "审计意见 我们审计了后附的财务报表"],
             statement, ["三、公司基本情况", "附注里的数字 营业收入 9,999.00 万元"], ["附注第二页 NOTE-PAGE"]]
    write_pdf(tmp_path / "688001_年报.pdf", pages)
    text = read_document(tmp_path / "688001_年报.pdf")
    assert text.count("\f") == 4 and "合并利润表" in text and "公司基本情况简介" in text
    assert "附注里的数字" not in text and "NOTE-PAGE" not in text
    pool = write_pool(tmp_path / "pool.csv", [["688001", "华兴源创", "设备", "20", ""]],
                      header=("代码", "名称", "行业", "市盈率TTM", "ROE"))
    r = cli(["screen", str(pool), "--reports", str(tmp_path), "-o", str(tmp_path / "out.json"), "--no-progress"],
            tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"][0]
    assert row["毛利率(%) gross margin"] == 40.0 and row["营收(亿元) revenue"] == pytest.approx(5.23105)


def test_reader_processes_end_when_there_is_nothing_to_read_and_start_again_for_the_next_file(tmp_path):
    """A workbook open all day holds no reader process while it reads no file."""
    from xladdin.reading.documents import Reports

    (tmp_path / "a.txt").write_text("营业收入12.5亿元。", encoding="utf-8")
    (tmp_path / "b.txt").write_text("营业收入13.5亿元。", encoding="utf-8")
    reports = Reports.of(None, tmp_path)
    reader = Reader(Cache(tmp_path / "c"), processes=1)
    reader.idle_s = 0.5
    try:
        for name in ("a.txt", "b.txt"):
            _, text = reader.text(reports.place({"report_file": str(tmp_path / name)})["report_file"])
            assert "营业收入" in text.result(BOUND_S)
            wait_until(lambda: not reader._workers, BOUND_S, message="the idle reader did not end")
        assert reader.snapshot()["files_read"] == 2
    finally:
        reader.close()


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="POSIX niceness")
def test_reader_processes_run_behind_the_process_that_asks_the_engine(tmp_path):
    """A reader process takes the CPU an engine on the same machine and the spreadsheet leave: its niceness is
    its parent's and ``reader_process.NICE`` more (at most 19)."""
    from xladdin.core import reader_process
    from xladdin.reading.documents import Reports

    (tmp_path / "a.txt").write_text("营业收入12.5亿元。", encoding="utf-8")
    reader = Reader(Cache(tmp_path / "c"), processes=1)
    try:
        _, text = reader.text(Reports.of(None, tmp_path).place({"report_file": str(tmp_path / "a.txt")})["report_file"])
        assert "营业收入" in text.result(BOUND_S)
        [worker] = reader._workers
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, worker.process.pid) == min(19, own + reader_process.NICE)
    finally:
        reader.close()


def _text_reports(tmp_path: Path, codes: list[str]) -> Path:
    """A plain-text report file per code in ``tmp_path/reports`` (each its own revenue), and the pool of
    those codes; returns the pool."""
    (tmp_path / "reports").mkdir()
    for i, code in enumerate(codes):
        (tmp_path / "reports" / f"{code}_年报.txt").write_text(f"证券代码：{code}\n营业收入{i + 1}.5亿元。",
                                                               encoding="utf-8")
    return write_pool(tmp_path / "pool.csv", [[c, f"公司{c}", "设备", "20", "10"] for c in codes],
                      header=("代码", "名称", "行业", "市盈率TTM", "ROE"))


def test_a_table_of_report_files_reads_no_further_ahead_than_the_engine_takes(tmp_path):
    """Each waiting row holds its whole report: with the engine slower than the readers, a table reads
    its files about as fast as the engine takes their rows, not every file at once."""
    import threading

    import diskcache

    from xladdin.core.resolver import FILES_AHEAD

    go = threading.Event()  # the engine takes nothing until the test has looked
    rows_n, window = FILES_AHEAD + 60, 2
    pool = _text_reports(tmp_path, [f"{600000 + i:06d}" for i in range(rows_n)])
    server = _answering_server(screen_answer(), hold=go)
    env = dict(os.environ, XLADDIN_ENGINE_URL=server.url, XLADDIN_CACHE_DIR=str(tmp_path / "cache"),
               XLADDIN_MAX_PARALLEL=str(window), XLADDIN_READERS="2")
    command = cli_command("screen", pool, "--reports", tmp_path / "reports", "-o", tmp_path / "out.json",
                          "--no-progress")
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def files_read() -> int:  # the files whose text the run has kept (one entry each, by stamp)
            if not (tmp_path / "cache" / "documents").is_dir():
                return 0
            with diskcache.Cache(str(tmp_path / "cache" / "documents")) as store:
                return sum(1 for key in store.iterkeys() if str(key).startswith("stamp:"))

        wait_until(lambda: files_read() >= window + FILES_AHEAD, BOUND_S, message="the files were not read")
        wait_until(lambda: server.hits.count("/v1/chat/completions") >= window, BOUND_S,
                   message="the engine was not asked")
        time.sleep(1.0)  # the readers had time to read on, were there no bound
        assert files_read() == window + FILES_AHEAD < rows_n
    finally:
        go.set()
        out, err = proc.communicate(timeout=BOUND_S)
        server.close()
    assert proc.returncode == 0, err[-2000:]
    facts = run_facts(tmp_path / "out.json")
    assert facts["rows"] == rows_n and facts["errors"] == 0 and facts["files_read"] == rows_n


@pytest.mark.slow
def test_files_kept_by_an_earlier_version_of_the_reading_code_are_read_again_once(tmp_path):
    """After an upgrade of the code that reads figures, a rerun reads each file again in the readers (its
    readings kept for the new code), and the next rerun opens none."""
    import diskcache

    pool = _text_reports(tmp_path, ["600001", "600002", "600003"])
    server = _answering_server(screen_answer())

    def run(name: str) -> dict:
        r = run_cli("screen", pool, "--reports", tmp_path / "reports", "-o", tmp_path / name, "--no-progress",
                    env=dict(os.environ, XLADDIN_ENGINE_URL=server.url, XLADDIN_CACHE_DIR=str(tmp_path / "cache")))
        assert r.returncode == 0, r.stderr[-2000:]
        return run_facts(tmp_path / name)

    try:
        assert run("a.json")["files_read"] == 3
        with diskcache.Cache(str(tmp_path / "cache" / "documents")) as store:  # as an earlier version kept them
            for key in [k for k in store.iterkeys() if str(k).startswith("readings:")]:
                store.set("readings:earlier-version:" + key.rsplit(":", 1)[1], store.pop(key))
            for key in [k for k in store.iterkeys() if str(k).startswith("result:")]:
                store.pop(key)  # results are kept by the whole code's digest: another version finds none
        again = run("b.json")
        assert again["files_read"] == 3 and again["files_from_store"] == 0 and again["errors"] == 0
        third = run("c.json")
        assert (third["files_read"], third["files_from_store"], third["results_recalled"]) == (0, 0, 3)
    finally:
        server.close()
    rows = [[{k: v for k, v in row.items() if k != "缓存命中 cached"}
             for row in json.loads((tmp_path / n).read_text(encoding="utf-8"))["rows"]]
            for n in ("a.json", "b.json", "c.json")]
    assert rows[0] == rows[1] == rows[2]  # the same verdicts, the answers from the cache


@pytest.mark.slow
def test_a_kept_result_is_only_one_the_model_s_answer_made_under_the_same_rules(tmp_path):
    """A report row's result is kept by its input (the file by its stamp) so that a rerun loads no text: but
    only a result made from the model's answer (a row code answered alone, 模型未作答, is asked again), and
    only for the same task: other rule thresholds make the rows again from the answers stored (no request)."""
    pool = _text_reports(tmp_path, ["600001", "600002"])
    broken, good = _answering_server("not json"), _answering_server(screen_answer())

    def run(name: str, server, *extra) -> tuple[dict, list[dict]]:
        r = run_cli("screen", pool, "--reports", tmp_path / "reports", "-o", tmp_path / name, "--no-progress",
                    *extra, env=dict(os.environ, XLADDIN_ENGINE_URL=server.url,
                                     XLADDIN_CACHE_DIR=str(tmp_path / "cache")))
        assert r.returncode == 0, r.stderr[-2000:]
        return run_facts(tmp_path / name), json.loads((tmp_path / name).read_text(encoding="utf-8"))["rows"]

    try:
        facts, rows = run("a.json", broken)
        assert facts["without_answer"] == 2 and all("模型未作答" in r["标记 flags"] for r in rows)
        facts, rows = run("b.json", good)  # asked again: nothing of the first run was kept
        assert (facts["results_recalled"], facts["engine_requests"]) == (0, 2)
        assert not any("模型未作答" in r["标记 flags"] for r in rows)
        facts, _ = run("c.json", good)
        assert (facts["results_recalled"], facts["engine_requests"]) == (2, 0)
        (tmp_path / "rules.toml").write_text("roe_high_risk_below = 12\n", encoding="utf-8")  # ROE 10: 高
        facts, strict = run("d.json", good, "--rules", tmp_path / "rules.toml")
        assert (facts["results_recalled"], facts["engine_requests"], facts["cache_hits"]) == (0, 0, 2)
        assert [r["风险等级 risk"] for r in rows] == ["中", "中"]
        assert [r["风险等级 risk"] for r in strict] == ["高", "高"]
    finally:
        broken.close()
        good.close()
