"""The worksheet functions inside a real LibreOffice Calc (headless): the extension built by
``xladdin calc build``, installed with unopkg, formulas entered in a sheet, each cell's final value
read once its answers arrive; the sheet saved, closed and reopened in a new LibreOffice, every cell
recalculated from the cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from kit import overloaded_while, run_cli

from xladdin.calc import build
from xladdin.calc.build import FUNCTIONS
from xladdin.calc.headless import column
from xladdin.sheet import functions

needs_calc = pytest.mark.skipif(shutil.which("soffice") is None or build.calc_python() is None,
                                reason="LibreOffice with Python (uno) is not installed")
WIDTH = len(functions.SPILL_FIELDS)
ROWS = 50
HEADER = ["代码", "名称", "行业", "市盈率TTM", "ROE", "每股收益", "财报摘要"]


def sheet_job() -> tuple[dict, dict[str, int]]:
    """50 distinct rows, 5 repeated, one bad row; a formula per row, one table formula, one cell of
    each other function and QWEN_STATUS. Returns the job and where each part's results are."""
    rows = [HEADER] + [[600000 + i, f"公司{i}", "白酒" if i % 2 else "银行", 20.0 + i, 10.0 + i % 12, 1.0,
                        f"营业收入{100 + i}亿元，同比增长{i % 9}%"] for i in range(ROWS)]
    rows += [rows[1 + i] for i in range(5)]  # the same rows again: no new request
    rows.append([600999, "坏行", "银行", 20.0, "abc", 1.0, "x"])
    last = len(rows)
    first, end = column(9), column(9 + WIDTH - 1)
    formulas = [[f"{first}{r}:{end}{r}", f"=QWEN_SCREEN(A{r}:G{r})"] for r in range(2, last + 1)]
    t0 = column(9 + WIDTH + 1)
    table = [f"{t0}1:{column(9 + 2 * WIDTH)}11", "=QWEN_SCREEN(A1:G11;1)"]
    others = [[f"A{last + 2}", "=QWEN(\"用一句话说明市盈率\")"], [f"B{last + 2}", "=QWEN_EXTRACT(G2;\"营业收入\")"],
              [f"C{last + 2}", "=QWEN_CLASSIFY(G2;\"白酒,银行\")"]]
    status = [f"A{last + 4}:B{last + 3 + functions.STATUS_ROWS}", "=QWEN_STATUS()"]
    job = {"rows": rows, "formulas": [*formulas, table, *others, status]}
    return job, {"rows": len(formulas), "table": len(formulas), "others": len(formulas) + 1,
                 "status": len(formulas) + 4}


def cli(*args: str) -> subprocess.CompletedProcess:
    r = run_cli(*args, timeout=None)
    assert r.returncode == 0, r.stderr
    return r


def model_env(tiny_model_path, tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    return env | {"XLADDIN_MODEL": str(tiny_model_path), "XLADDIN_CACHE_DIR": str(tmp_path / "cache"),
                  "XLADDIN_N_THREADS": "2"}


def status_of(block: list[list]) -> dict:
    return {row[0]: row[1] for row in block}


@needs_calc
def test_the_extension_s_types_and_names_come_from_one_table(tmp_path):
    """The component has a method for every function of the table; the type library shipped is the
    table's interface compiled (checked where LibreOffice's SDK is installed)."""
    source = (build.HERE / "component.py").read_text()
    for f in FUNCTIONS:
        assert f"def {f.method}(self" in source, f.name
        assert f'<node oor:name="{f.method}"' in build.xcu() and f"any {f.method}(" in build.idl()
    try:
        built = build.compile_types(tmp_path / "types.rdb")
    except Exception as e:  # no SDK here
        pytest.skip(f"cannot compile the interface here: {e}")
    assert built.read_bytes() == build.TYPES.read_bytes(), "XQwenCalc.rdb is stale: run build.compile_types"


@pytest.mark.slow
@needs_calc
def test_a_sheet_of_qwen_screen_cells_fills_and_reopens_from_the_cache(tiny_model_path, tmp_path):
    oxt = tmp_path / "xladdin.oxt"
    cli("calc", "build", "-o", str(oxt))
    job, at = sheet_job()
    (tmp_path / "job.json").write_text(json.dumps(job, ensure_ascii=False), encoding="utf-8")
    env = model_env(tiny_model_path, tmp_path)
    profile, book = tmp_path / "profile", tmp_path / "book.ods"
    first = build.headless(["--profile", str(profile), "--install", str(oxt), "--fill", str(tmp_path / "job.json"),
                      "--save", str(book), "--bound", "240"], env)
    assert first["filled"], first["values"]
    values = first["values"]
    data = job["rows"][1:]
    for i, block in enumerate(values[: at["rows"]]):
        row, given = block[0], data[i]
        if given[1] == "坏行":
            assert row[0].startswith("#QWEN! ") and "roe" in row[0], row
            continue
        assert row[0] == f"{given[0]}.SH" and row[2] in ("高", "中", "低"), row
        assert len(row) == WIDTH
    table = values[at["table"]]
    assert table[0] == functions.spill_header()
    assert [r[0] for r in table[1:]] == [f"{600000 + i}.SH" for i in range(10)]
    assert [r[:4] for r in table[1:]] == [b[0][:4] for b in values[:10]]  # the table and its rows agree
    extracted, classified = values[at["others"] + 1][0][0], values[at["others"] + 2][0][0]
    answer = values[at["others"]][0][0]
    assert isinstance(answer, str) and answer and not answer.startswith("#QWEN")
    assert isinstance(extracted, float) or str(extracted).startswith("#QWEN! ")  # a number, or why not
    assert classified in ("白酒", "银行")  # one of the labels (constrained)
    status = status_of(first["recalculated"][at["status"]])  # QWEN_STATUS in the sheet
    distinct = ROWS + 3  # 50 rows (the 5 repeats and the table's rows are the same), QWEN, EXTRACT, CLASSIFY
    assert status["asked of the engine"] == distinct, status
    assert status["engine"].endswith("(private CPU server)"), status  # the embedded engine, in its own process
    assert status["cache entries"] == distinct, status
    assert all(f.startswith("{=") and "QWEN" in f.upper() for f in first["formulas"])

    again = build.headless(["--profile", str(profile), "--open", str(book), "--bound", "120"], env)
    assert again["filled"]
    assert again["values"][: at["status"]] == values[: at["status"]]  # every cell as before
    status = status_of(again["recalculated"][at["status"]])
    assert status["asked of the engine"] == 0 and status["cache hit rate"] == 1.0, status
    assert status["engine"].endswith("(private CPU server, not started)"), status  # no model loaded to reopen


@pytest.mark.slow
@needs_calc
def test_the_template_opens_in_calc_with_working_formulas(tiny_model_path, tmp_path):
    """``xladdin calc template``: the Excel template as a Calc workbook whose every QWEN_SCREEN is an
    array formula of the add-in; opened in Calc, each row gets its verdict."""
    from xladdin.cli.calc_cmd import TEMPLATE

    book, oxt = tmp_path / "stock_screen.ods", tmp_path / "xladdin.oxt"
    out = cli("calc", "template", "-o", str(book)).stdout
    assert "21 formulas call the add-in" in out, out
    cli("calc", "build", "-o", str(oxt))
    opened = build.headless(["--profile", str(tmp_path / "profile"), "--install", str(oxt), "--open", str(book),
                       "--bound", "240"], model_env(tiny_model_path, tmp_path))
    assert opened["filled"]
    import openpyxl

    pool = openpyxl.load_workbook(TEMPLATE)["Pool"]
    codes = [pool[f"A{r}"].value for r in range(2, 23)]
    assert len(opened["values"]) == len(codes) == 21
    for code, block, formula in zip(codes, opened["values"], opened["formulas"], strict=True):
        assert str(block[0][0]).startswith(str(code)) and block[0][2] in ("高", "中", "低"), block
        assert formula.startswith("{=QWEN_SCREEN(") and "Rules" in formula


class Listener:
    """What Calc registers on a volatile result: it keeps the values it is told."""

    def __init__(self):
        self.values = []

    def modified(self, event):
        self.values.append(event)


def test_a_waiting_call_is_one_result_settled_once_and_an_error_is_asked_again(tmp_path):
    """Without LibreOffice: the runtime's side of a volatile result. A pending call gives the same
    result however often Calc asks; its settle tells the listening cell the verdict, after which a
    recalculation computes nothing; an error is not final, so a later recalculation asks again."""
    import threading

    from xladdin.calc.runtime import CalcFunctions, Waiting
    from xladdin.core.batcher import Batcher
    from xladdin.core.cache import Cache
    from xladdin.testing import ScriptedEngine

    fail = threading.Event()
    fail.set()

    settled = threading.Event()
    posted = []
    engine = ScriptedEngine(overloaded_while(fail), delay=0.05)
    f = CalcFunctions(lambda: Waiting(lambda source, value: value),
                      lambda fn: (posted.append(fn), settled.set()),
                      batcher=Batcher(engine, Cache(tmp_path / "c", enabled=False), window_ms=0))
    try:
        row = ((600519.0, "贵州茅台", "白酒", 25.0, 30.0, 50.0, "营业收入1505亿元"),)
        first = f.call("QWEN_SCREEN", (row, None, None))
        assert first.value[0][0] == functions.PENDING and f.call("QWEN_SCREEN", (row, None, None)) is first
        cell = Listener()
        first.addResultListener(cell)  # Calc listens: told the placeholder at once
        assert settled.wait(10) and len(posted) == 1
        posted.pop()()  # LibreOffice's main thread runs the settle
        assert cell.values[-1][0][0].startswith("#QWEN! engine error 503") and not first.final
        f.runtime().resolver.error_ttl = 0  # the failure's 30 s are over: the next call asks again
        fail.clear()
        settled.clear()
        again = f.call("QWEN_SCREEN", (row, None, None))  # Calc recalculates the cell: asked again
        assert again is not first and again.value[0][0] == functions.PENDING
        assert settled.wait(10)
        posted.pop()()
        assert again.final and again.value[0][:3] == ["600519.SH", "贵州茅台", "低"]
        asked = len(engine.calls)
        assert f.call("QWEN_SCREEN", (row, None, None)) is again and len(engine.calls) == asked  # nothing computed
    finally:
        f.close()


@pytest.mark.slow
@needs_calc
def test_qwen_status_shows_current_numbers_without_a_hard_recalculation(tiny_model_path, tmp_path):
    """A QWEN_STATUS cell entered before the calls it counts: once their answers are in, a normal
    recalculation (F9, ``calculate``) shows them — a call without arguments is reached by no change
    Calc knows of, so the add-in tells it its new value when calls settle."""
    oxt = tmp_path / "xladdin.oxt"
    cli("calc", "build", "-o", str(oxt))
    texts = ["白酒行业龙头", "城商行", "区域银行", "高端白酒"]
    status = f"A10:B{9 + functions.STATUS_ROWS}"
    # the classifications: a formula beside the first text filled down, as a user fills it (a formula per row)
    job = {"rows": [["text"], *[[t] for t in texts]], "formulas": [[status, "=QWEN_STATUS()"]],
           "fill_down": [["C2", '=QWEN_CLASSIFY(A2;"白酒,银行")', len(texts)]]}
    (tmp_path / "job.json").write_text(json.dumps(job, ensure_ascii=False), encoding="utf-8")
    out = build.headless(["--profile", str(tmp_path / "profile"), "--install", str(oxt), "--fill",
                          str(tmp_path / "job.json"), "--bound", "240"], model_env(tiny_model_path, tmp_path))
    assert out["filled"], out["values"]
    assert all(block[0][0] in ("白酒", "银行") for block in out["values"][: len(texts)]), out["values"]
    assert all(f"A{r}" in formula and "QWEN_CLASSIFY" in formula  # each row's formula reads its own row
               for r, formula in enumerate(out["formulas"][: len(texts)], 2)), out["formulas"]
    shown = status_of(out["calculated"][len(texts)])
    assert shown["asked of the engine"] == len(texts) and shown["pending cells"] == 0, shown
    assert shown["engine"].endswith("(private CPU server)"), shown
