"""The paths users take, with the real counterpart: a pool file through the CLI's library path and
the CLI itself, real HTTP servers on 127.0.0.1 that misbehave, xlwings' own argument conversion."""

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import kit
import openpyxl
import pytest
from conftest import TINY_MAX_TOKENS, MockServer, Server, run_python, tiny_settings, vllm_models
from kit import Caller, cli_command, free_port, wait_until

from xladdin.core.batcher import Batcher
from xladdin.core.cache import Cache
from xladdin.core.resolver import Resolver
from xladdin.engine.openai_http import OpenAIHTTPEngine
from xladdin.errors import EngineError, EngineTimeout
from xladdin.jobs.pool_screen import screen_file
from xladdin.reading.pool import SAMPLE_POOL, read_pool
from xladdin.settings import Settings
from xladdin.tasks import ClassifyTask, ScreenTask
from xladdin.testing import ScriptedEngine, screen_answer

ROOT = Path(__file__).parent.parent


def run_screen(tmp_path, pool: Path, out: str, answer: str, **settings):
    engine = ScriptedEngine(lambda _: answer)
    batcher = Batcher(engine, Cache(tmp_path / "cache"))
    try:
        return screen_file(pool, tmp_path / out, tiny_settings(tmp_path, **settings), progress=False, batcher=batcher)
    finally:
        batcher.close()


def report_rows(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["rows"]


def run_cli(*args, env_extra=None, timeout=120):
    env = dict(os.environ, XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS), **(env_extra or {}))
    return kit.run_cli(*args, env=env, timeout=timeout)


# ------------------------------------------------------------------ 1, 2: units and numbers of a CSV
def test_csv_money_in_wan_converts_like_xlsx_and_numbers_stay_numbers(tmp_path):
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,ROE(%),市盈率TTM,净利润(万元),备注,财报摘要\n"
                    "000001,平安银行,\"11.38%\",4.1,\"4,645,500\",-12.0,净利润464.55亿元\n",
                    encoding="utf-8")
    answer = screen_answer("盈利稳定", net_profit=(464.55, "亿元"))
    summary = run_screen(tmp_path, pool, "r.json", answer)
    (row,) = report_rows(summary.output)
    assert "数据存疑" not in row["标记 flags"], row["说明 notes"]  # 4,645,500 万元 = 464.55 亿元
    assert row["ROE(%)"] == 11.38 and row["净利润(万元)"] == 4645500 and row["备注"] == -12.0
    assert row["代码"] == "000001"  # a code keeps its zeros

    summary = run_screen(tmp_path, pool, "r.xlsx", answer)
    ws = openpyxl.load_workbook(summary.output)["Results"]
    header = [c.value for c in ws[1]]
    cells = {h: c for h, c in zip(header, ws[2], strict=True)}
    assert cells["净利润(万元)"].value == 4645500 and cells["净利润(万元)"].data_type == "n"
    assert cells["备注"].value == -12 and cells["备注"].data_type == "n"  # no apostrophe, a number

    summary = run_screen(tmp_path, pool, "r.csv", answer)
    (_, body) = list(csv.reader(summary.output.open(encoding="utf-8-sig")))
    assert "-12.0" in body and "'-12.0" not in body


# ------------------------------------------------------------------ 4: percent-formatted XLSX cells
def test_xlsx_percent_formatted_roe_is_read_as_shown(tmp_path):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["代码", "名称", "ROE", "市盈率TTM", "财报摘要"])
    ws.append(["600519", "贵州茅台", 0.3419, 25.0, "营收1505亿元"])
    ws["C2"].number_format = "0.00%"
    wb.save(tmp_path / "pool.xlsx")
    (rec,) = read_pool(tmp_path / "pool.xlsx").records()
    assert rec["roe"] == pytest.approx(34.19)
    summary = run_screen(tmp_path, tmp_path / "pool.xlsx", "r.json", screen_answer())
    (row,) = report_rows(summary.output)
    assert row["风险等级 risk"] == "低" and row["ROE"] == pytest.approx(34.19)


# ------------------------------------------------------------------ 5: absurd magnitudes
def test_huge_numbers_are_a_field_error_not_an_internal_error(tmp_path):
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,ROE,市盈率TTM\n600519,贵州茅台,1e30,25\n000001,平安银行,10,1e300\n600036,招商银行,15,6\n",
                    encoding="utf-8")
    summary = run_screen(tmp_path, pool, "r.json", screen_answer())
    rows = report_rows(summary.output)
    assert rows[0]["错误 error"] == "#QWEN! roe is out of range: '1e30' (|value| must be below 1e+15)"
    assert rows[1]["错误 error"].startswith("#QWEN! pe_ttm is out of range")
    assert rows[2]["错误 error"] is None and summary.errors == 2


# ------------------------------------------------------------------ 6: control characters
def test_control_characters_never_break_the_xlsx_report(tmp_path):
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,ROE,市盈率TTM,财报摘要\n600519,贵\x01州茅台,30,25,营收\x0b1505亿元\x1f\n",
                    encoding="utf-8")
    for _ in range(2):  # and again, answered from the cache
        summary = run_screen(tmp_path, pool, "r.xlsx", screen_answer("理由\x07带控制字符"))
        ws = openpyxl.load_workbook(summary.output)["Results"]
        header = [c.value for c in ws[1]]
        row = dict(zip(header, [c.value for c in ws[2]], strict=True))
        assert (row["名称"], row["财报摘要"], row["理由 reason"]) == ("贵州茅台", "营收1505亿元", "理由带控制字符")


def test_a_failing_writer_never_loses_the_run(tmp_path, monkeypatch):
    from xladdin.jobs import report

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "_write_xlsx", broken)
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,ROE,市盈率TTM\n600519,贵州茅台,30,25\n", encoding="utf-8")
    with pytest.raises(Exception, match="saved as .*r.rescued.json") as e:
        run_screen(tmp_path, pool, "r.xlsx", screen_answer())
    assert "disk full" in str(e.value)
    (row,) = report_rows(tmp_path / "r.rescued.json")
    assert row["风险等级 risk"] == "低"


# ------------------------------------------------------------------ 7, 8: refused before any request, one line
def test_bad_outputs_and_inputs_are_refused_before_the_first_request(tmp_path):
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称\n600519,贵州茅台\n", encoding="utf-8")
    (tmp_path / "adir.xlsx").mkdir()
    (tmp_path / "afile").write_text("x")
    corrupt = tmp_path / "corrupt.xlsx"
    corrupt.write_bytes(b"PK\x03\x04 this is not a workbook")
    down = {"XLADDIN_ENGINE_URL": "http://127.0.0.1:9/v1"}  # any request would fail differently
    cases = [
        ([str(pool), "-o", str(tmp_path / "adir.xlsx")], "is a directory"),
        ([str(pool), "-o", str(pool)], "pool.csv is one of the command's inputs (pool.csv): name another file"),
        ([str(pool), "-o", str(tmp_path / "afile" / "r.xlsx")], "cannot write"),
        ([str(corrupt), "-o", str(tmp_path / "r.xlsx")], "corrupt.xlsx is not a readable .xlsx workbook"),
    ]
    for args, message in cases:
        r = run_cli("screen", *args, "--no-progress", env_extra=down)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert pool.read_text(encoding="utf-8") == "代码,名称\n600519,贵州茅台\n"  # the pool is untouched


def test_a_ten_megabyte_cell_is_read_trimmed_and_written(tmp_path):
    pool = tmp_path / "pool.csv"
    big = "营收1505亿元。" * 1_000_000  # ~10 MB in one cell
    pool.write_text(f"代码,名称,ROE,市盈率TTM,财报摘要\n600519,贵州茅台,30,25,{big}\n", encoding="utf-8")
    summary = run_screen(tmp_path, pool, "r.xlsx", screen_answer())
    ws = openpyxl.load_workbook(summary.output)["Results"]
    header = [c.value for c in ws[1]]
    row = dict(zip(header, [c.value for c in ws[2]], strict=True))
    assert "文本截断" in row["标记 flags"] and len(row["财报摘要"]) == 32_767  # Excel's cell limit


# ------------------------------------------------------------------ real HTTP servers that misbehave
def test_cache_key_and_provenance_name_the_model_behind_the_served_name(tmp_path):
    keys, ids = [], []
    for root in ("Qwen/Qwen3.5-9B", "Qwen/Qwen3-8B-AWQ"):
        server = MockServer({"/v1/models": vllm_models(root)})
        try:
            with Batcher(server.engine(tiny_settings(tmp_path, engine_url=server.url)), Cache(tmp_path / "c")) as b:
                b.start()
                keys.append(b.key(ScreenTask(), ScreenTask().parse({"code": "600519", "name": "贵州茅台"})))
                ids.append(b.engine.model_id)
                assert b.engine.served == "qwen" and b.engine.max_model_len == 8192
                assert b.engine.describe() == f"qwen = {root} at {server.url}"
        finally:
            server.close()
    assert ids == ["Qwen/Qwen3.5-9B", "Qwen/Qwen3-8B-AWQ"] and keys[0] != keys[1]


def _answering_server(answer: str, hold: threading.Event | None = None) -> Server:
    """A server on 127.0.0.1 answering every chat request with ``answer`` (each held until ``hold`` is set,
    when given)."""
    def chat(body):
        if hold is not None:
            hold.wait(120)
        data = {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": answer}}]}
        return 200, "application/json", json.dumps(data, ensure_ascii=False).encode()

    return Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": chat})


def _screen_through(tmp_path, server: Server, csv_text: str) -> tuple[list[str], list[dict]]:
    """The user texts the server was sent for ``csv_text`` through ``xladdin screen``, and the report's rows."""
    pool = tmp_path / "pool.csv"
    pool.write_text(csv_text, encoding="utf-8")
    try:
        r = run_cli("screen", str(pool), "-o", str(tmp_path / "r.json"), "--no-progress",
                    env_extra={"XLADDIN_ENGINE_URL": server.url})
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    sent = [b["messages"][-1]["content"] for b in server.bodies if "messages" in b]
    return sent, json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["rows"]


def test_a_csv_row_reaches_the_server_as_compact_json_of_its_given_fields(tmp_path):
    """What the server is sent for a CSV row: its fields as compact JSON (no space after a colon or a comma:
    15 fewer Qwen3 tokens on a short row, bench/results/gpu.json short_pool_trials box 9), its empty
    fields left out, and the answer back in the report. The text states no ROE: the given one is sent."""
    sent, [row] = _screen_through(tmp_path, _answering_server(screen_answer("盈利稳定")),
                                  "代码,名称,行业,ROE,财报摘要\n600519,贵州茅台,,30.5,营业收入1505.60亿元，同比增长18.04%。\n")
    assert sent == ['{"code":"600519.SH","name":"贵州茅台","roe":30.5,'
                    '"report_text":"营业收入1505.60亿元，同比增长18.04%。"}']
    assert row["理由 reason"] == "盈利稳定"


def test_a_given_field_code_reads_in_the_text_is_not_sent_and_code_still_flags_its_mismatch(tmp_path):
    """ROE and EPS stated in the text: code reads them and compares the given fields with them, so the
    row the server gets leaves both out (screen-10), and a field that disagrees with the text is still
    数据存疑 with both numbers; PE-TTM, which the text does not state, is sent."""
    sent, [row] = _screen_through(
        tmp_path, _answering_server(screen_answer("盈利稳定")),
        "代码,名称,市盈率TTM,ROE,每股收益,财报摘要\n"
        "600519,贵州茅台,25.1,5.0,59.49,基本每股收益59.49元；加权平均净资产收益率30.26%。\n")
    assert sent == ['{"code":"600519.SH","name":"贵州茅台","pe_ttm":25.1,'
                    '"report_text":"基本每股收益59.49元；加权平均净资产收益率30.26%。"}']
    assert "数据存疑" in row["标记 flags"]
    assert "ROE: 文本30.26 vs 字段5" in row["说明 notes"] and "EPS" not in row["说明 notes"]


def test_models_endpoint_that_is_not_json_is_one_line_exit_2(tmp_path):
    server = Server({"/v1/models": (200, "text/html", b"<html>welcome to nginx</html>")})
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称\n600519,贵州茅台\n", encoding="utf-8")
    try:
        r = run_cli("screen", str(pool), "-o", str(tmp_path / "r.json"), "--no-progress",
                    env_extra={"XLADDIN_ENGINE_URL": server.url})
    finally:
        server.close()
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"xladdin: error: {server.url}/models did not list models as JSON: "
                                "'<html>welcome to nginx</html>' — is this an OpenAI-compatible server?")


def test_timeout_bounds_the_whole_request_and_reports_the_real_wait(tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepts, never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
    try:
        engine = OpenAIHTTPEngine(Settings.load({"engine_url": url, "timeout": 1.5, "retries": 3}).openai_http)
        with Batcher(engine, Cache(tmp_path / "c")) as b, pytest.raises(EngineTimeout) as e:
            b.start()
    finally:
        silent.close()
    # the time really waited, measured by the engine: 1.5 s, rounded; four attempts of 1.5 s would say 6s
    assert str(e.value) == f"engine timeout after 2s ({url})"


def test_an_engine_that_cannot_start_is_not_asked_again_by_every_cell(tmp_path):
    server = MockServer({})  # every path 404: /v1/models fails
    try:
        with Batcher(server.engine(tiny_settings(tmp_path, engine_url=server.url, retries=0)),
                     Cache(tmp_path / "c")) as b:
            results = Resolver(b).map(ScreenTask(), [{"code": 600000 + i, "name": f"公司{i}"} for i in range(50)])
    finally:
        server.close()
    assert all(isinstance(r, EngineError) and "engine error 404" in str(r) for r in results)
    assert server.hits == ["/v1/models"]  # one start, its failure shared by all 50 rows


# ------------------------------------------------------------------ 9: Ctrl-C
@pytest.mark.slow
def test_ctrl_c_stops_within_seconds_exit_130_keeping_the_cache(tiny_model_path, tmp_path):
    pool = tmp_path / "pool.csv"
    with pool.open("w", encoding="utf-8") as f:
        f.write("代码,名称,ROE,市盈率TTM,财报摘要\n")
        for i in range(60):
            f.write(f"{600000 + i},公司{i},{10 + i % 9},{20 + i},2023年营业收入{100 + i}亿元，同比增长{i}%。\n")
    env = dict(os.environ, XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS), XLADDIN_MODEL=str(tiny_model_path),
               XLADDIN_MAX_PARALLEL="2")
    proc = subprocess.Popen(cli_command("screen", pool, "-o", tmp_path / "r.xlsx", "--no-progress"), env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    cache_dir = Path(os.environ["XLADDIN_CACHE_DIR"])

    def stored() -> int:
        if not cache_dir.exists():
            return 0
        c = Cache(cache_dir)
        try:
            return c.stats()["entries"]
        finally:
            c.close()

    wait_until(lambda: proc.poll() is not None or stored() >= 2, 120, 0.3, message="no two answers stored")
    done = stored()
    assert done >= 2 and proc.poll() is None, "the run should still be going"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted — finished rows are cached" in err and "Traceback" not in err
    c = Cache(cache_dir)
    assert c.stats()["entries"] >= done
    c.close()


# ------------------------------------------------------------------ 10, 11: the server launcher
@pytest.mark.slow
def test_sigterm_to_serve_stops_its_server_and_the_key_stays_secret(tiny_model_path):
    port = free_port()
    env = dict(os.environ, XLADDIN_API_KEY="s3cret-key-0123456789")
    cmd = [sys.executable, "-m", "xladdin.server", "serve", "--engine", "cpu", "--model", str(tiny_model_path),
           "--port", str(port), "--parallel", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    while True:
        line = proc.stdout.readline()
        lines.append(line)
        if line.startswith("ready:") or not line:
            break
    assert lines[-1].startswith("ready:"), lines
    assert "s3cret-key-0123456789" not in "".join(lines) and "api key: s3c…89" in "".join(lines)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert children  # the CPU server is serve's child
    for pid in children:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert b"s3cret" not in f.read()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert "stopped" in out
    with socket.socket() as s:  # nothing listens any more: the CPU server went with it
        assert s.connect_ex(("127.0.0.1", port)) != 0
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


# ------------------------------------------------------------------ 13-17: Excel under xlwings
COM_ERRORS = {-2146826281, -2146826246, -2146826259, -2146826288, -2146826252, -2146826265, -2146826273}


class WindowsCells:
    """The engine-specific stages of xlwings' conversion, as ``xlwings._xlwindows`` does them (that
    module needs pywin32): read, blanks become ``empty_as`` and Excel error codes ``None``; written,
    ``None`` and NaN become blank cells."""

    name, type, apps = "excel", "desktop", None

    @staticmethod
    def prepare_xl_data_element(x, date_format):
        return "" if x is None or (isinstance(x, float) and x != x) else x

    @staticmethod
    def clean_value_data(data, datetime_builder, empty_as, number_builder, err_to_str):
        def one(v):
            if v in ("", None):
                return empty_as
            if number_builder is not None and isinstance(v, float):
                return number_builder(v)
            return None if isinstance(v, int) and v in COM_ERRORS else v

        return [[one(v) for v in row] for row in data]


def xlwings_read(value, options):
    """An argument as xlwings' own conversion pipeline hands it to a UDF (as ``call_udf`` does on
    Windows: ``conversion.read(None, value, options)``)."""
    import xlwings
    from xlwings import conversion

    if "excel" not in [e.name for e in xlwings.engines]:
        xlwings.engines.add(xlwings.main.Engine(impl=WindowsCells()))
    return conversion.read(None, value, options)


MISSING = -2147352572  # what COM passes for an argument left out


@pytest.fixture
def windows_udfs(monkeypatch):
    """xlwings' Windows UDF machinery (``xlwings.udfs``: ``call_udf``, ``xlfunc``/``xlarg``/``xlret``)
    imported with stand-ins for the few COM objects it touches, and this project's UDF module decorated by
    those decorators, as the COM server imports it. Yields (call_udf, module name)."""
    import asyncio
    import importlib
    import importlib.util
    import types

    import xlwings

    stubs = {n: types.ModuleType(n) for n in ("pythoncom", "pywintypes", "win32com", "win32com.client",
                                              "xlwings._xlwindows", "xlwings.com_server")}
    stubs["pythoncom"].CoInitialize = lambda: None
    stubs["pythoncom"].IID_IDispatch = object()
    stubs["pythoncom"].CoMarshalInterThreadInterfaceInStream = lambda iid, api: ("stream", api)
    stubs["win32com.client"].Dispatch = lambda *a, **k: None

    class ComCell:  # the caller as xlwings._xlwindows.Range wraps it: address, sheet, book, COM object
        def __init__(self, xl):
            self.xl, self.api = xl, types.SimpleNamespace(CLSID="clsid")
            full = xl.get("book", "pool.xlsx")  # not yet saved, unless the test names where it is
            book = types.SimpleNamespace(name=os.path.basename(full), fullname=full)
            self.sheet = types.SimpleNamespace(name="Pool", book=book)

        @property
        def address(self):
            return self.xl["address"]

    stubs["xlwings._xlwindows"].Range = ComCell
    stubs["xlwings._xlwindows"].is_range_instance = lambda arg: False  # values arrive as COM gives them
    stubs["xlwings.com_server"].loop = asyncio.new_event_loop()
    for name, module in stubs.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(xlwings, "_xlwindows", stubs["xlwings._xlwindows"], raising=False)
    if "excel" not in [e.name for e in xlwings.engines]:
        xlwings.engines.add(xlwings.main.Engine(impl=WindowsCells()))
    xw_udfs = importlib.import_module("xlwings.udfs")
    monkeypatch.setitem(sys.modules, "xlwings.udfs", xw_udfs)
    monkeypatch.setattr(xlwings, "udfs", xw_udfs, raising=False)
    # the project's UDFs, decorated as on Windows (xlwings exports these three there as func/arg/ret)
    import xladdin.excel.udfs as ours

    monkeypatch.setattr(xlwings, "func", xw_udfs.xlfunc)
    monkeypatch.setattr(xlwings, "arg", xw_udfs.xlarg)
    monkeypatch.setattr(xlwings, "ret", xw_udfs.xlret)
    spec = importlib.util.spec_from_file_location("xladdin.excel._udfs_as_on_windows", ours.__file__)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    yield xw_udfs.call_udf, spec.name, module
    module.set_runtime(None)
    xw_udfs.udf_modules.pop(spec.name, None)


def test_udfs_round_trip_through_xlwings_call_udf(windows_udfs, tmp_path):
    """Arguments and results go through xlwings' own ``call_udf``: its argument conversion, the caller
    it builds, the function as its decorators registered it, and its return conversion."""
    from xladdin.sheet import functions
    from xladdin.sheet.functions import CellRuntime

    call_udf, name, module = windows_udfs
    engine = ScriptedEngine(lambda m: screen_answer("业绩稳健"), delay=0.3)
    recalculated = []  # the cells Excel is asked to recalculate, as call_udf's caller reaches them
    runtime = CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0),
                          told=kit.recalculates(recalculated.append))
    module.set_runtime(runtime)
    row = ((600519.0, "贵州茅台", "白酒", 25.0, 34.19, 59.49, "营收1505亿元", None, None, None),)
    rules = (("roe_low_risk_from", 40.0), ("pe_limit", 50.0))  # a Rules range as COM passes it
    first = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, {"address": "$L$2"})
    assert first[0][0] == functions.PENDING and len(first[0]) == len(functions.SPILL_FIELDS)
    wait_until(lambda: recalculated, 30, message="the cell was never recalculated")
    assert [(c.address, c.sheet.name, c.sheet.book.name) for c in recalculated] == [("$L$2", "Pool", "pool.xlsx")]
    done = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None, {"address": "$L$2"})
    assert done[0][:5] == ["600519.SH", "贵州茅台", "低", 100, "业绩稳健"]
    assert "" in done[0] and None not in done[0]  # empty figures written as blank cells, as Excel gets them
    stricter = call_udf(name, "QWEN_SCREEN", (row, MISSING, rules, MISSING), None, {"address": "$L$3"})
    assert stricter[0][2] == "中" and len(engine.calls) == 1  # rules in code: the model is not asked again
    bad = ((600519.0, "贵州茅台", "白酒", "N/A?", "abc", 1.0, "x", None, None, None),)
    shown = call_udf(name, "QWEN_SCREEN", (bad, MISSING, MISSING, MISSING), None, {"address": "$L$4"})
    assert shown[0][0] == "#QWEN! pe_ttm is not a number: 'N/A?'" and len(shown[0]) == len(functions.SPILL_FIELDS)
    status = dict(call_udf(name, "QWEN_STATUS", (), None, {"address": "$A$1"}))
    assert status["asked of the engine"] == 1 and status["pending cells"] == 0


# One cell's walk: a QWEN_SCREEN row with its report text, and one without (no report: nothing is read of
# one). What a request costs is bounded: the threads that carry it (``kit.Walk.carriers``: a miss, the cell's
# thread, the loop and the recalculation's; a disk hit, the cell's thread and the loop) and the futures made
# for it (its fate, and the call's while it waits); a call up into a layer above fails the test too.
WALK_TEXTS = {"营业收入12.5亿元，同比增长10%；归属于上市公司股东的净利润1.2亿元，同比增长8%。": "report text",
              None: "no report"}
MISS_CARRIERS, HIT_CARRIERS = 3, 2
MISS_FUTURES, HIT_FUTURES = 2, 1


@pytest.mark.parametrize("text", list(WALK_TEXTS), ids=list(WALK_TEXTS.values()))
def test_one_cell_walks_down_the_layers_and_returns_through_its_future(windows_udfs, tmp_path, text):
    """One ``QWEN_SCREEN`` cell as Excel calls it (xlwings' ``call_udf``: a miss, pending, then its value on
    the recalculation) against an HTTP engine on 127.0.0.1, then the same cell in a workbook opened again
    (a disk hit, its value on the first call): every xladdin function entered, on every thread, is recorded
    with the function that called it and its thread. No function calls a function of a layer above its own
    (``test_layers.LAYERS``): the answer returns through futures; the miss is carried by at most
    ``MISS_CARRIERS`` threads and makes ``MISS_FUTURES`` futures, the hit ``HIT_CARRIERS`` and
    ``HIT_FUTURES``."""
    from test_fate_doors import chat_route

    from xladdin.sheet import functions
    from xladdin.sheet.functions import CellRuntime

    call_udf, name, module = windows_udfs
    server = MockServer({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": chat_route})
    row = ((600000.0, "公司", "银行", 5.0, 10.0, 0.5, text),)
    walks = []
    try:
        for opened in ("first", "again"):
            walk = kit.Walk(aliases={name: "xladdin.excel.udfs"})  # the UDF module as Windows imports it
            walks.append(walk)
            recalculated: list = []
            with walk.walking():  # the batcher's threads start inside: each runs the hook
                settings = tiny_settings(tmp_path, engine_url=server.url)
                runtime = CellRuntime(batcher=Batcher.from_settings(settings, server.engine(settings),
                                                                    own_engine=True),
                                      told=kit.recalculates(recalculated.append))
                module.set_runtime(runtime)
                try:
                    runtime.batcher.start()
                    call_udf(name, "QWEN_SCREEN", (((600001.0, *row[0][1:]),), MISSING, MISSING, MISSING), None,
                             {"address": "$L$9"})  # another row first: what every cell shares is started
                    if opened == "first":
                        wait_until(recalculated.copy, 30, message="the first cell was never recalculated")
                    recalculated.clear()
                    walk.recording.set()
                    shown = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None,
                                     {"address": "$L$2"})
                    if opened == "first":
                        assert shown[0][0] == functions.PENDING, shown
                        wait_until(recalculated.copy, 30, message="the cell was never recalculated")
                        shown = call_udf(name, "QWEN_SCREEN", (row, MISSING, MISSING, MISSING), None,
                                         {"address": "$L$2"})
                    walk.recording.clear()
                finally:
                    module.set_runtime(None)
                    runtime.close()
            assert shown[0][:3] == ["600000.SH", "公司", "中"], (opened, shown)
    finally:
        server.close()
    miss, hit = walks
    for walk in walks:
        assert not walk.upward, sorted(walk.upward)
    assert "xladdin.engine.openai_http" in miss.entered and "xladdin.core.resolver" in miss.entered
    assert len(miss.carriers()) <= MISS_CARRIERS and miss.futures <= MISS_FUTURES, (miss.threads, miss.futures)
    assert "xladdin.engine.openai_http" not in hit.entered, hit.said()
    assert len(hit.carriers()) <= HIT_CARRIERS and hit.futures <= HIT_FUTURES, (hit.threads, hit.futures)


def test_cells_called_by_excel_s_threads_never_touch_the_disk_one_read_per_request(windows_udfs, tmp_path,
                                                                                      monkeypatch):
    """Cells called through xlwings' ``call_udf`` from Excel's threads, then the workbook reopened: every read
    and every write of the answers is on the batcher's disk thread, never a cell's, and each request is read
    once (a recalculation answers from memory; the reopened workbook reads each row once, and gets its
    values at once)."""
    import concurrent.futures

    from xladdin.sheet import functions
    from xladdin.sheet.functions import CellRuntime

    call_udf, name, module = windows_udfs
    disk = kit.record_disk(monkeypatch)
    rows = [((600000.0 + i, f"公司{i}", "行业", 20.0, 18.0, 1.0, f"营收{100 + i}亿元", None, None, None),)
            for i in range(8)]

    def cells_of(runtime):
        module.set_runtime(runtime)
        with concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="excel") as excel:  # a cell per thread
            return list(excel.map(lambda i: call_udf(name, "QWEN_SCREEN", (rows[i], MISSING, MISSING, MISSING),
                                                     None, {"address": f"$L${i + 2}"}), range(len(rows))))

    engine = ScriptedEngine(lambda m: screen_answer("业绩稳健"), delay=0.05)
    recalculated = []
    runtime = CellRuntime(batcher=Batcher(engine, Cache(tmp_path / "c"), window_ms=0),
                          told=kit.recalculates(recalculated.append))
    try:
        assert [c[0][0] for c in cells_of(runtime)] == [functions.PENDING] * len(rows)
        wait_until(lambda: len(recalculated) == len(rows), 30, message="not every cell was recalculated")
        assert [c[0][0] for c in cells_of(runtime)] == [f"{600000 + i}.SH" for i in range(len(rows))]
        cache = runtime.batcher.cache
        assert cache.hits + cache.misses == len(rows) and len(engine.calls) == len(rows)  # one read per request
    finally:
        runtime.close()
    reopened = CellRuntime(batcher=Batcher(ScriptedEngine(lambda m: screen_answer()), Cache(tmp_path / "c")),
                           told=kit.recalculates(recalculated.append))
    try:
        reopened.batcher.start()  # the engine started by the workbook's first cells
        assert [c[0][0] for c in cells_of(reopened)] == [f"{600000 + i}.SH" for i in range(len(rows))]
        assert len(recalculated) == len(rows) and reopened.pending_cells == 0  # values at once: no recalculation
        assert reopened.batcher.cache.hits == len(rows) and reopened.batcher.cache.misses == 0
    finally:
        reopened.close()
    assert [op for op, _, _ in disk].count("get") == 2 * len(rows)  # one read per request, in each session
    assert [op for op, _, _ in disk].count("set") == len(rows)
    assert {thread.partition("_")[0] for _, _, thread in disk} == {kit.DISK_THREAD}, disk


def test_classify_labels_as_text_survive_xlwings_conversion():
    from xladdin.excel.udfs import ARG_OPTIONS

    options = ARG_OPTIONS["QWEN_CLASSIFY"]["labels"]
    as_text = xlwings_read("利好,利空，中性", options)
    assert as_text == ["利好,利空，中性"]  # what xlwings passes for ndim=1
    assert ClassifyTask().parse({"text": "x", "labels": as_text}).labels == ("利好", "利空", "中性")
    as_range = xlwings_read((("利好", "利空", "中性"),), options)  # a 1×3 range, as COM gives it
    assert ClassifyTask().parse({"text": "x", "labels": as_range}).labels == ("利好", "利空", "中性")


def test_screen_row_through_xlwings_conversion(tmp_path):
    from xladdin.excel.udfs import ARG_OPTIONS
    from xladdin.sheet import functions

    raw = ((600519.0, "贵州茅台", "白酒", 25.0, 34.19, 59.49, "营收1505亿元", None, None, None, None),)
    values = xlwings_read(raw, ARG_OPTIONS["QWEN_SCREEN"]["values"])
    records, _ = functions.screen_records(values, False)
    assert ScreenTask().parse(records[0]).code == "600519.SH"
    single = xlwings_read(600519.0, ARG_OPTIONS["QWEN_SCREEN"]["values"])  # one cell
    assert functions.screen_records(single, False)[0] == [{"code": 600519.0}]


def test_com_is_not_imported_off_windows(tmp_path, monkeypatch):
    from xladdin.excel import udfs

    monkeypatch.chdir(tmp_path)
    assert udfs.available() is False
    assert Path.cwd() == tmp_path  # importing xlwings.com_server would have moved it


def test_a_cell_is_recalculated_on_the_com_loop_against_a_recording_stand_in(monkeypatch):
    """The Windows path with a stand-in for xlwings' COM server: ``available`` finds it, the cell's future
    runs ``recalculate`` (the runtime's ``told``), which returns at once, and the formula is written back on
    the COM loop's own thread."""
    import asyncio
    import concurrent.futures
    import types

    import xlwings

    from xladdin.excel import udfs
    from xladdin.sheet.functions import Answered

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    fake = types.ModuleType("xlwings.com_server")
    fake.loop = loop
    monkeypatch.setitem(sys.modules, "xlwings.com_server", fake)
    monkeypatch.setattr(xlwings, "com_server", fake, raising=False)
    monkeypatch.setattr(sys, "platform", "win32")
    xw_udfs = types.ModuleType("xlwings.udfs")  # its Windows-only imports stand in here too
    xw_udfs.has_dynamic_array = lambda pid: pid == 4242  # one Excel with Formula2, one without
    monkeypatch.setitem(sys.modules, "xlwings.udfs", xw_udfs)
    done = threading.Event()

    class Range:  # what xlwings' ComRange offers the rewrite: formula get/set, awaited on the COM loop
        def __init__(self, pid):
            self.sheet = types.SimpleNamespace(book=types.SimpleNamespace(app=types.SimpleNamespace(pid=pid)))
            self.calls = []

        async def _record(self, name, value=None):
            self.calls.append((name, threading.current_thread() is thread))
            if name.startswith("set"):
                done.set()
            return value

        async def get_formula2(self):
            return await self._record("get_formula2", "=QWEN_SCREEN(A2:J2)")

        async def set_formula2(self, f):
            await self._record("set_formula2")

        async def get_formula(self):
            return await self._record("get_formula", "=QWEN_SCREEN(A2:J2)")

        async def set_formula(self, f):
            await self._record("set_formula")

    try:
        assert udfs.available() is True
        for pid, expected in ((4242, ["get_formula2", "set_formula2"]), (4343, ["get_formula", "set_formula"])):
            done.clear()
            caller = Range(pid)
            settled = concurrent.futures.Future()  # the cell's future, as the cells' runtime hands it to Excel
            settled.add_done_callback(udfs.recalculate)
            settled.set_result(Answered(caller, lambda: None, ()))
            assert done.wait(10)
            assert caller.calls == [(name, True) for name in expected]  # on the COM loop's thread
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_refresh_writes_one_block_and_keeps_users_formulas():
    from xladdin.excel.macros import verdict_column, verdict_formula

    existing = (("",), ("=QWEN_SCREEN(A3:J3,FALSE,Rules!$A$2:$B$10)",), ("=A4*2",), (None,), ("my note",))
    block = verdict_column(existing, 6)
    assert block == [[verdict_formula(2)], [verdict_formula(3)], ["=A4*2"], [verdict_formula(5)], ["my note"],
                     [verdict_formula(7)]]
    assert verdict_column("", 1) == [[verdict_formula(2)]]


def test_every_formula_of_the_template_reads_the_whole_rules_table():
    """The Rules range in the shipped template's formulas (and in what Refresh writes) covers every rule
    key on its Rules sheet, with room to spare: read from the workbook, not from the constant."""
    import re

    from xladdin.excel import macros
    from xladdin.tasks.rules import Rules

    wb = openpyxl.load_workbook(ROOT / "workbook_templates" / "stock_screen.xlsx")
    pool, rules = wb["Pool"], wb["Rules"]
    formulas = [c.value for c in pool["L"][1:] if isinstance(c.value, str) and c.value.startswith("=QWEN_SCREEN")]
    assert len(formulas) >= 10 and macros.verdict_formula(2) == formulas[0]
    for formula in formulas:
        sheet, c1, r1, c2, r2 = re.search(r",(\w+)!\$([A-Z])\$(\d+):\$([A-Z])\$(\d+)\)$", formula).groups()
        assert sheet == "Rules" and (c1, c2) == ("A", "B")
        keys = {rules[f"A{r}"].value for r in range(int(r1), int(r2) + 1)} - {None}
        assert keys == set(Rules.model_fields), formula
        assert rules[f"A{int(r1) - 1}"].value == "key" and all(rules[f"A{r}"].value is None
                                                             for r in range(int(r2) + 1, int(r2) + 20))


@pytest.mark.slow
def test_a_process_that_used_a_udf_exits_cleanly(tiny_model_path, tmp_path):
    code = (
        "from xladdin.excel import udfs\n"
        "out = udfs.QWEN_SCREEN([[600519.0, '贵州茅台', '白酒', 25.0, 34.19, 59.49, '营收1505亿元']])\n"
        "assert out[0][0] == '600519.SH', out\n"
        "print('ok')\n"
    )
    r = run_python(code, tiny_model_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "Task was destroyed" not in r.stderr and "Traceback" not in r.stderr, r.stderr


# ------------------------------------------------------------------ 18: verify outside a checkout
@pytest.mark.slow
def test_installed_package_carries_the_verify_sample(tmp_path):
    import shutil

    src = tmp_path / "src"  # a copy: building in place would leave build/ in the checkout
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", ".gpu", "build", "*.egg-info",
                                                              "__pycache__", ".pytest_cache"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import zipfile

    (wheel,) = tmp_path.glob("xladdin-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "xladdin/data/sample_pool.csv" in names and "xladdin/profiles_data/qwen3.5-9b-24gb.toml" in names
    assert SAMPLE_POOL.is_relative_to(ROOT / "xladdin")  # verify reads it from the package
    # the profiles (server/profiles in the checkout) are found in the installed package, away from a checkout
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import xladdin.engine.profiles as p; "
            "print(p.PROFILE_DIR); print(p.get_profile('qwen3.5-9b-24gb').name)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(site)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(site / "xladdin" / "profiles_data"), "qwen3.5-9b-24gb"], r.stdout


def test_verify_manifest_errors_are_config_errors(tmp_path, capsys):
    from xladdin.server.cli import main as server_main

    binary = tmp_path / "SHA256SUMS"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 10)
    for manifest, message in ((tmp_path / "missing", "No such file"), (binary, "is not text")):
        code = server_main(["verify", "--model", str(SAMPLE_POOL), "--manifest", str(manifest)])
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, err


# ------------------------------------------------------------------ xladdin eval on a small generated gold set
@pytest.mark.slow
def test_eval_reports_accuracy_and_evidence_through_the_cli(tiny_model_path, tmp_path):
    gold = tmp_path / "gold.csv"
    rows = [
        ("600519", "贵州茅台", "营业收入1505.60亿元，归属于上市公司股东的净利润747.34亿元。", "1505.6", "747.34", "低"),
        ("002024", "ST易购", "公司本期亏损3,152.10万元，营收626.61亿元。", "626.61", "-0.31521", "高"),
        ("000001", "平安银行", "营业收入1,646.99亿元；归母净利润464.55亿元。", "1646.99", "464.55", "中"),
        ("600036", "招商银行", "年报摘要：本行经营稳健。", "", "1466.0", ""),  # a figure the text lacks
    ]
    with gold.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["代码", "名称", "ROE", "市盈率TTM", "财报摘要", "gold_revenue", "gold_net_profit", "gold_risk"])
        for code, name, text, rev, np_, risk in rows:
            w.writerow([code, name, 16 if risk == "低" else (8 if risk == "中" else 2), 20, text, rev, np_, risk])
    r = run_cli("eval", str(gold), "-o", str(tmp_path / "eval.json"), "--no-progress", "--model", str(tiny_model_path),
                timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "eval.json").read_text(encoding="utf-8"))
    net = report["fields"]["gold_net_profit"]
    assert (net["rows"], net["correct"], net["evidence_rate"]) == (4, 3, 0.75)  # read in code, with quotes
    assert net["correct_and_quoted"] == 0.75
    assert net["misses"][0]["code"] == "600036" and net["misses"][0]["read"] is None
    assert report["fields"]["gold_revenue"]["accuracy"] == 1.0
    assert report["fields"]["gold_risk"] == {"rows": 3, "correct": 3, "accuracy": 1.0, "evidence_rate": None,
                                             "correct_and_quoted": None, "misses": []}
    assert "gold_net_profit" in r.stdout and "75.0%" in r.stdout


# ------------------------------------------------------------------ no cell waits for a hung or down server
class HungServer:
    """A real socket on 127.0.0.1 that accepts connections and never answers; counts them."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.accepted = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for c in self.accepted:
            c.close()


@pytest.mark.parametrize("kind", ["hung", "down"])
def test_no_cell_waits_for_a_hung_or_down_server(tmp_path, kind):
    from xladdin.excel import udfs
    from xladdin.sheet import functions
    from xladdin.sheet.functions import CellRuntime

    server = HungServer() if kind == "hung" else None
    url = server.url if server else "http://127.0.0.1:9/v1"
    recalculated = []
    rt = CellRuntime(tiny_settings(tmp_path, engine_url=url, timeout=2, retries=0),
                     told=kit.recalculates(recalculated.append))
    udfs.set_runtime(rt)
    rows = [[600000.0 + i, f"公司{i}", "行业", 20.0, 15.0, 1.0, "营收100亿元"] for i in range(500)]
    try:
        first = [udfs.QWEN_SCREEN([r], False, None, Caller(f"$L${i + 2}")) for i, r in enumerate(rows)]
        status = dict(udfs.QWEN_STATUS())
        expected = f"#QWEN! engine timeout after 2s ({url})" if server else f"#QWEN! engine offline ({url})"
        shown = [o[0][0] for o in first]
        pending = shown.count(functions.PENDING)
        # a placeholder at once (the engine starts off Excel's threads), or, once the start has
        # failed (a refused connection fails at once), the error itself
        assert set(shown) <= {functions.PENDING, expected} and status["pending cells"] <= pending, set(shown)
        assert pending == 500 if server else pending >= 1  # a placeholder: no call waited for the engine
        wait_until(lambda: len(recalculated) >= pending, 30, message=lambda: f"{len(recalculated)} of {pending} "
                   "pending cells recalculated")
        assert len(recalculated) == pending  # every pending cell is recalculated when its request fails
        again = [udfs.QWEN_SCREEN([r], False, None, Caller(f"$L${i + 2}")) for i, r in enumerate(rows)]
        assert {o[0][0] for o in again} == {expected}
        assert len(recalculated) == pending  # showing the error asks nothing again: no loop
        if server:
            assert len(server.accepted) == 1  # one start for 500 cells, not one per cell
    finally:
        udfs.set_runtime(None)
        if server:
            server.close()


def test_an_off_schema_answer_is_asked_again_with_the_validation_error(tmp_path):
    answers = iter(['{"revenue": "lots", "reason": "好"}', screen_answer("营收稳健")])
    engine = ScriptedEngine(lambda messages: next(answers))
    with Batcher(engine, Cache(tmp_path / "c")) as b:
        (res,) = Resolver(b).map(ScreenTask(), [{"code": "600519", "name": "贵州茅台", "roe": 30, "pe_ttm": 25}])
    assert res.reason == "营收稳健" and res.risk_level.value == "低"
    first, second = engine.calls
    assert len(second) == len(first) + 2
    assert second[-2] == {"role": "assistant", "content": '{"revenue": "lots", "reason": "好"}'}
    fix = second[-1]["content"]
    assert second[-1]["role"] == "user" and "does not match the schema" in fix and "revenue" in fix


def test_an_over_long_reason_is_cut_in_code_not_asked_again():
    long = json.loads(screen_answer())
    long["reason"] = "这是一条远远超过三十个字的理由，" * 4
    out = ScreenTask().validate_output(json.dumps(long, ensure_ascii=False))
    assert out.reason == long["reason"][:30]


def test_screen_table_with_header_through_xlwings_dataframe_converter(tmp_path):
    """QWEN_SCREEN(table, TRUE): the range (as xlwings converts it) becomes a DataFrame through
    xlwings' DataFrame converter, read like ``xladdin.screen(df)`` reads a frame."""
    import pandas as pd

    from xladdin.excel.udfs import ARG_OPTIONS
    from xladdin.reading.pool import pool_from_frame
    from xladdin.sheet import functions

    raw = (("代码", "名称", "ROE(%)", "净利润(万元)", "财报摘要"),
           (600519.0, "贵州茅台", 34.19, 6272.05, "营收1505亿元"),
           (None, None, None, None, None),  # a blank row keeps its place in the spill
           ("000001", "平安银行", None, None, ""))
    values = xlwings_read(raw, ARG_OPTIONS["QWEN_SCREEN"]["values"])
    frame = functions.table_frame(functions.to_rows(values))
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == list(raw[0]) and len(frame) == 3
    records, columns = functions.screen_records(values, True)
    assert columns == list(raw[0]) and records[1] is None
    first = ScreenTask().parse(records[0])
    assert first.code == "600519.SH" and first.roe == 34.19 and first.net_profit == 0.627205  # 万元 → 亿元
    assert ScreenTask().parse(records[2]).code == "000001.SZ" and ScreenTask().parse(records[2]).roe is None
    as_frame = pd.DataFrame([list(r) for r in raw[1:]], columns=list(raw[0]))
    assert pool_from_frame(as_frame).records()[0] == records[0]  # the pandas front door reads it the same
