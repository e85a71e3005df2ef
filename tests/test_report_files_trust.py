"""Report files are read only from where the user pointed, and only up to a size bound.

A pool or workbook handed over by someone else names the files: an absolute path, ``..`` or a
symlink out of the folder must never make the product read a file (and send its text to the engine,
and quote it in the report). Each case goes through the user's path: a pool through the CLI, a
cell through the UDFs with Excel's caller, the same function bodies Calc calls.
"""

from __future__ import annotations

import json
import os

import pytest
from kit import Caller, run_cli
from test_documents import PAGE_1, PAGE_2, cli, make_pdf, write_pool

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.excel import udfs
from xladdin.settings import Settings
from xladdin.sheet.functions import CellRuntime
from xladdin.testing import ScriptedEngine, screen_answer

SECRET = "机密口令 hunter2 营业收入99.99亿元"


@pytest.fixture
def layout(tmp_path):
    """The user's pool folder with one report of its own, and a secret outside it."""
    pool_dir = tmp_path / "pool"
    (pool_dir / "reports").mkdir(parents=True)
    make_pdf(pool_dir / "reports" / "688001_年报.pdf", [PAGE_1, PAGE_2])
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / "key.txt").write_text(SECRET, encoding="utf-8")
    (pool_dir / "link.txt").symlink_to(secret_dir / "key.txt")
    return pool_dir, secret_dir


def test_a_pool_cannot_make_the_cli_read_a_file_outside_its_folder(tiny_model_path, tmp_path, layout):
    pool_dir, secret_dir = layout
    pool = write_pool(pool_dir / "pool.csv", [
        ["688001", "华兴源创", "设备", "-40", "", "reports/688001_年报.pdf"],  # the pool's own folder: read
        ["600001", "甲", "银行", "5", "8", str(secret_dir / "key.txt")],  # absolute, elsewhere
        ["600002", "乙", "银行", "5", "8", "../secret/key.txt"],  # climbs out
        ["600003", "丙", "银行", "5", "8", "link.txt"],  # a symlink in the folder to a file outside
    ])
    r = cli(["screen", str(pool), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]  # three rows refused, the first screened
    report = (tmp_path / "out.json").read_text(encoding="utf-8")
    assert "hunter2" not in report and "99.99" not in report
    rows = json.loads(report)["rows"]
    assert rows[0]["错误 error"] is None and rows[0]["风险等级 risk"] == "高"
    assert "key.txt" in rows[1]["错误 error"] and "outside the folders" in rows[1]["错误 error"]
    assert "XLADDIN_REPORT_DIRS" in rows[1]["错误 error"]  # the setting that allows it
    assert "'..' is not allowed" in rows[2]["错误 error"]
    assert "link.txt" in rows[3]["错误 error"] and "outside the folders" in rows[3]["错误 error"]

    # the user allows the folder: the same pool reads it
    r2 = cli(["screen", str(pool), "-o", str(tmp_path / "out2.json")], tiny_model_path, tmp_path,
             XLADDIN_REPORT_DIRS=str(secret_dir))
    rows = json.loads((tmp_path / "out2.json").read_text(encoding="utf-8"))["rows"]
    assert rows[1]["错误 error"] is None and rows[3]["错误 error"] is None, r2.stderr[-2000:]
    assert "'..' is not allowed" in rows[2]["错误 error"]  # never, even inside an allowed folder


def test_a_report_file_over_the_size_bound_is_its_rows_error(tiny_model_path, tmp_path):
    (tmp_path / "big.txt").write_text("营业收入12.5亿元。" * 20_000, encoding="utf-8")  # 0.3 MiB
    (tmp_path / "small.txt").write_text("营业收入12.5亿元，同比增长8%。", encoding="utf-8")
    pool = write_pool(tmp_path / "pool.csv", [["600001", "甲", "电子", "20", "10", "big.txt"],
                                              ["600002", "乙", "电子", "20", "10", "small.txt"]])
    r = cli(["screen", str(pool), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path,
            XLADDIN_MAX_REPORT_MIB="0.25")
    assert r.returncode == 1, r.stderr[-2000:]
    rows = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    error = rows[0]["错误 error"]
    assert "big.txt" in error and "0.25 MiB" in error and "XLADDIN_MAX_REPORT_MIB" in error
    assert rows[1]["错误 error"] is None and rows[1]["营收(亿元) revenue"] == 12.5


def test_report_text_that_ends_in_a_file_name_is_text(tiny_model_path, tmp_path):
    pool = write_pool(tmp_path / "pool.csv", [["600519", "贵州茅台", "白酒", "30", "30",
                                               "营业收入1505.60亿元，详见年报.pdf"]],
                      header=("代码", "名称", "行业", "市盈率TTM", "ROE", "财报摘要"))
    r = cli(["screen", str(pool), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"][0]
    assert row["错误 error"] is None and row["营收(亿元) revenue"] == pytest.approx(1505.6)


@pytest.fixture
def cells_runtime(tmp_path):
    settings = Settings.load({"cache_dir": tmp_path / "cache"})
    with Batcher(ScriptedEngine(lambda _: screen_answer("稳健")), Cache(tmp_path / "cache")) as b:
        rt = CellRuntime(settings, batcher=b)
        udfs.set_runtime(rt)
        try:
            yield rt
        finally:
            udfs.set_runtime(None)


def test_a_workbook_cannot_make_a_cell_read_a_file_outside_its_folder(cells_runtime, tmp_path, layout):
    pool_dir, secret_dir = layout
    caller = Caller(book=pool_dir / "pool.xlsx")
    for path in (str(secret_dir / "key.txt"), "../secret/key.txt", "link.txt"):
        cell = udfs.QWEN_HIGHLIGHTS(path, None, None, caller)
        assert cell.startswith("#QWEN! report_file") and "hunter2" not in cell, (path, cell)
        row = udfs.QWEN_SCREEN([[600001.0, "甲", "银行", 5.0, 8.0, None, path]], False, None, caller)[0]
        assert row[0].startswith("#QWEN! report_file"), (path, row)
    # Calc passes no caller: only folders the user named (report_dirs) are read
    from xladdin.sheet import functions

    calc_cell = functions.highlights(cells_runtime, str(secret_dir / "key.txt"), None, None)
    assert calc_cell.startswith("#QWEN! report_file") and "outside the folders" in calc_cell
    assert engine_requests(cells_runtime) == 0  # nothing reached the engine


def engine_requests(rt: CellRuntime) -> int:
    return rt.batcher.snapshot()["engine_requests"]


def test_a_named_folder_is_read_from_a_cell_without_a_workbook(tmp_path, layout, monkeypatch):
    _, secret_dir = layout
    monkeypatch.setenv("XLADDIN_REPORT_DIRS", os.pathsep.join([str(tmp_path / "none"), str(secret_dir)]))
    settings = Settings.load({"cache_dir": tmp_path / "cache"})
    assert settings.report_dirs == (tmp_path / "none", secret_dir)
    from xladdin.reading import documents

    record = CellRuntime(settings, batcher=Batcher(ScriptedEngine(lambda _: "{}"), Cache(None))).reports(None).place(
        {"report_text": str(secret_dir / "key.txt")})
    assert documents.attach(record)["report_text"] == SECRET
    with pytest.raises(documents.InputError, match="not read"):  # a path no front door placed
        documents.attach({"report_file": str(secret_dir / "key.txt")})


def test_relative_paths_as_a_user_types_them_are_read(tiny_model_path, tmp_path):
    """`xladdin screen pool.csv` from the pool's folder, and `--reports ../reports` from a folder beside it:
    the folders the user chose may be written relatively, with '..'; only the pool's own paths may not."""
    work, reports = tmp_path / "work", tmp_path / "reports"
    (work / "mine").mkdir(parents=True)
    reports.mkdir()
    make_pdf(work / "mine" / "688001_年报.pdf", [PAGE_1, PAGE_2])
    make_pdf(reports / "688002_年报.pdf", [PAGE_1, PAGE_2])
    write_pool(work / "pool.csv", [["688001", "华兴源创", "设备", "-40", "", "mine/688001_年报.pdf"],
                                   ["688002", "另一家", "设备", "-40", "", ""]])
    env = dict(os.environ, XLADDIN_MODEL=str(tiny_model_path), XLADDIN_CACHE_DIR=str(tmp_path / "cache"))
    r = run_cli("screen", "pool.csv", "--reports", "../reports", "-o", "out.json", "--no-progress", cwd=work,
                env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((work / "out.json").read_text(encoding="utf-8"))["rows"]
    assert [row["错误 error"] for row in rows] == [None, None]
    assert [row["风险等级 risk"] for row in rows] == ["高", "高"]
