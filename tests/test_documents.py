"""Reports as files and long texts, through the user's doors: a PDF made here (tables with wrapped
labels, a unit line, two pages) through the CLI, ``--reports DIR``, ``QWEN_SCREEN`` with a path;
damaged files; a whole annual report as a cell; servers that are slow or refuse long requests.
The real annual report in ``../shared/data`` is read when it is there (never committed)."""

from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

import pytest
from conftest import TINY_MAX_TOKENS, MockServer, Server, tiny_settings, vllm_models
from kit import Caller, run_cli, wait_until

from xladdin.core.batcher import Batcher
from xladdin.core.resolver import Resolver
from xladdin.errors import InputError
from xladdin.excel import udfs
from xladdin.reading.documents import read_document
from xladdin.reading.figures import read_figures
from xladdin.reading.tables import read_tables
from xladdin.sheet import functions
from xladdin.sheet.functions import CellRuntime
from xladdin.tasks import ScreenResult, ScreenTask
from xladdin.tasks.rules import Flag
from xladdin.testing import write_pdf

pytestmark = pytest.mark.slow
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "ashare"
REAL_PDF = SHARED / "annual_reports" / "603339_四方科技_2019年报.pdf"
FINGLM = SHARED / "finglm" / "parsed_annual_report_300617_2019.json"

PAGE_1 = ["2023年年度报告", "第二节 公司简介和主要财务指标", "七、近三年主要会计数据和财务指标",
          "(一) 主要会计数据",
          "单位：万元 币种：人民币", "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
          "营业收入 52,310.50 48,002.10 8.98 40,100.00",
          "归属于上市公司股东", "的净利润 -3,120.40 -1,050.20 不适用 2,300.00",
          "经营活动产生的现金", "流量净额 1,200.00 900.00 33.33 800.00"]
PAGE_2 = ["(二) 主要财务指标", "主要财务指标 2023年 2022年 本期比上年同期增减(%) 2021年",
          "基本每股收益（元／股） -0.25 -0.08 不适用 0.19",
          "扣除非经常性损益后的基本每股收益（元／股） -0.30 -0.10 不适用 0.15",
          "加权平均净资产收益率（%） -4.10 -1.32 减少2.78个百分点 2.95", "八、境内外会计准则下会计数据差异",
          "子公司少数股东分担的当期亏损超过了少数股东在该子公司期初所有者权益中所享有的份额"]


make_pdf = write_pdf  # a PDF with a text layer, one list of lines per page


def scanned_pdf(path: Path) -> Path:
    """A page with a picture and no text layer, as a scanner writes it."""
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path))
    c.rect(40, 400, 300, 300, fill=1)
    c.showPage()
    c.save()
    return path


POOL_HEADER = ("代码", "名称", "行业", "市盈率TTM", "ROE", "报告文件")


def write_pool(path: Path, rows: list[list[str]], header=POOL_HEADER) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def cli(args: list[str], model_path, tmp_path, timeout: float = 300, **env_extra: str):
    env = dict(os.environ, XLADDIN_MODEL=str(model_path), XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS),
               XLADDIN_CACHE_DIR=str(tmp_path / "cache"), **env_extra)
    return run_cli(*args, "--no-progress", env=env, timeout=timeout)


def test_a_generated_pdf_through_the_cli_gives_the_table_figures_with_quote_and_page(tiny_model_path, tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    make_pdf(reports / "688001_年报.pdf", [PAGE_1, PAGE_2])
    pool = write_pool(tmp_path / "pool.csv", [["688001", "华兴源创", "设备", "-40", "", "reports/688001_年报.pdf"],
                                              ["600000", "浦发银行", "银行", "5", "8", "reports/none.pdf"]])
    r = cli(["screen", str(pool), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]  # one row's file is missing: that row's error, the other screened
    rows = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    got = rows[0]
    assert got["错误 error"] is None
    assert got["营收(亿元) revenue"] == pytest.approx(5.23105) and got["营收增长(%) revenue growth"] == 8.98
    assert got["净利润(亿元) net profit"] == pytest.approx(-0.31204)
    assert got["上年净利润(亿元) prior-year profit"] == pytest.approx(-0.10502)
    assert got["上年营收(亿元) prior-year revenue"] == pytest.approx(4.80021)  # each row's prior-year column
    assert got["上年EPS(元) prior-year EPS"] == -0.08 and got["上年ROE(%) prior-year ROE"] == -1.32
    assert got["经营现金流(亿元) operating cash flow"] == pytest.approx(0.12)
    assert got["文本EPS(元) EPS in text"] == -0.25 and got["文本ROE(%) ROE in text"] == -4.1  # not the 扣非 row
    # the wrapped label joined, the cells as printed, and the page
    assert "净利润「归属于上市公司股东的净利润 -3,120.40 -1,050.20 不适用 2,300.00」(第1页)" in got["出处 evidence"]
    assert "ROE「加权平均净资产收益率（%） -4.10 -1.32 减少2.78个百分点 2.95」(第2页)" in got["出处 evidence"]
    # two years of losses read from the report feed the rules
    assert got["风险等级 risk"] == "高" and "亏损" in got["标记 flags"]
    assert "688001_年报.pdf" in got["阅读范围 read"]
    assert "none.pdf" in rows[1]["错误 error"] and "file not found" in rows[1]["错误 error"]

    # the same file found by its code in a folder, and answered from the cache (the key is the content)
    pool2 = write_pool(tmp_path / "pool2.csv", [["688001", "华兴源创", "设备", "-40", ""]],
                       header=("代码", "名称", "行业", "市盈率TTM", "ROE"))
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (reports / "688001_年报.pdf").rename(moved / "688001_2023年报.pdf")
    r2 = cli(["screen", str(pool2), "--reports", str(moved), "-o", str(tmp_path / "out2.json")], tiny_model_path,
             tmp_path)
    assert r2.returncode == 0, r2.stderr[-2000:]
    assert "1 rows, 1 from cache" in r2.stdout
    again = json.loads((tmp_path / "out2.json").read_text(encoding="utf-8"))["rows"][0]
    assert again["净利润(亿元) net profit"] == got["净利润(亿元) net profit"] and again["风险等级 risk"] == "高"


def test_damaged_files_are_their_rows_errors_naming_the_file(tmp_path):
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.4\n garbage that is no PDF")
    (tmp_path / "notpdf.pdf").write_bytes(b"PK\x03\x04 a zip named .pdf")
    make_pdf(tmp_path / "locked.pdf", [PAGE_1], encrypt="secret")
    scanned_pdf(tmp_path / "scan.pdf")
    (tmp_path / "report.docx").write_bytes(b"x")
    expected = {"bad.pdf": "damaged", "notpdf.pdf": "not a PDF", "locked.pdf": "encrypted",
                "scan.pdf": "no text layer", "report.docx": "expected one of",
                "nothere.txt": "file not found"}
    for name, words in expected.items():
        with pytest.raises(InputError) as e:
            read_document(tmp_path / name)
        assert name in str(e.value) and words in str(e.value) and e.value.field == "report_file"


def test_text_and_html_reports(tmp_path):
    (tmp_path / "a.txt").write_bytes("营业收入12.5亿元，同比增长3%。".encode("utf-16"))
    (tmp_path / "b.html").write_text("<html><body><table><tr><td>营业收入</td><td>1,250,000,000.00</td></tr></table>"
                                     "<p>归属于上市公司股东的净利润2.1亿元</p><script>var x=1;</script></body></html>",
                                     encoding="utf-8")
    assert read_figures(read_document(tmp_path / "a.txt"))["revenue"].value == 12.5
    html = read_document(tmp_path / "b.html")
    assert "var x" not in html and read_figures(html)["net_profit"].value == 2.1


def test_qwen_screen_with_a_report_path_in_the_row(tiny_engine, tmp_path):
    pdf = make_pdf(tmp_path / "688001.pdf", [PAGE_1, PAGE_2])
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine=tiny_engine))
    udfs.set_runtime(runtime)
    try:
        row = [688001.0, "华兴源创", "设备", -40.0, None, None, str(pdf)]  # the path where the text would go
        caller = Caller(book=tmp_path / "pool.xlsx")  # a workbook saved beside the report

        def settled():
            spilled = udfs.QWEN_SCREEN([row], False, None, caller)[0]
            return spilled if spilled[0] != functions.PENDING else None

        spilled = wait_until(settled, 60, 0.1, message="the cell never settled")
        out = dict(zip(functions.SPILL_FIELDS, spilled, strict=True))
        assert out["risk_level"] == "高" and out["net_profit"] == pytest.approx(-0.31204)
        assert "(第2页)" in out["evidence"] and "688001.pdf" in out["read"]
        missing = udfs.QWEN_SCREEN([[688001.0, "华兴源创", "设备", -40.0, None, None, str(tmp_path / "gone.pdf")]],
                                   False, None, caller)
        assert str(missing[0][0]).startswith("#QWEN! report_file") and "gone.pdf" in missing[0][0]
        # a relative path: from the calling workbook's folder, as Excel's caller names it
        relative = udfs.QWEN_SCREEN([[*row[:6], "688001.pdf"]], False, None, caller)[0]
        assert dict(zip(functions.SPILL_FIELDS, relative, strict=True))["net_profit"] == pytest.approx(-0.31204)
        # a workbook elsewhere may not make the cell read this folder's file
        elsewhere = udfs.QWEN_SCREEN([row], False, None, Caller(book=tmp_path / "other" / "pool.xlsx"))[0][0]
        assert elsewhere.startswith("#QWEN! report_file") and "outside the folders" in elsewhere
    finally:
        udfs.set_runtime(None)


def long_report() -> str:
    """The FinGLM parsed annual report flattened to text (191,724 characters) when present, else a
    generated text of the same size whose figures stand near the end."""
    if FINGLM.is_file():
        data = json.loads(FINGLM.read_text(encoding="utf-8"))
        parts = [item.get("content") or "" for items in data.values() for item in items]
        return "\n".join(p for p in parts if p)
    filler = "公司坚持稳健经营，持续加大研发投入，子公司少数股东分担的当期亏损计入少数股东权益。"
    return filler * 4300 + "报告期内公司实现营业收入3.18亿元，同比增长10.5%；归属于上市公司股东的净利润6,361.64万元。"


def test_a_whole_annual_report_as_a_csv_field_gives_a_verdict(tiny_model_path, tmp_path):
    text = long_report()
    assert len(text) > 150_000
    pool = tmp_path / "long.csv"
    write_pool(pool, [["300617", "安靠智电", "电气设备", "30", "", text]],
               header=("代码", "名称", "行业", "市盈率TTM", "ROE", "财报摘要"))
    r = cli(["screen", str(pool), "-o", str(tmp_path / "long.json")], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    (got,) = json.loads((tmp_path / "long.json").read_text(encoding="utf-8"))["rows"]
    assert got["错误 error"] is None and got["风险等级 risk"] in ("中", "高")
    assert got["营收(亿元) revenue"] == pytest.approx(3.18, rel=0.01)
    assert got["净利润(亿元) net profit"] == pytest.approx(0.636, rel=0.01)
    assert "亏损" not in got["标记 flags"]  # a minority's share of a loss is not the company's result
    assert "文本截断" in got["标记 flags"] and "读了全文" in got["阅读范围 read"]


@pytest.mark.parametrize("kind", ["slow", "refuses"])
def test_a_server_that_is_slow_or_refuses_long_requests_never_loses_the_row(kind, tmp_path):
    def chat(body):
        if kind == "slow":
            time.sleep(3)
            return 200, "application/json", b"{}"
        return 400, "application/json", json.dumps(
            {"error": {"message": "This model's maximum context length is 8192 tokens."}}).encode()

    server = Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": chat})
    try:
        rows = [{"code": "300617", "name": "安靠智电", "roe": 8, "pe_ttm": 30, "report_text": long_report()},
                {"code": "600519", "name": "贵州茅台", "roe": 30, "pe_ttm": 25, "report_text": "营业收入1505.60亿元"}]
        with Batcher.from_settings(tiny_settings(tmp_path, engine_url=server.url, timeout=1, retries=0)) as b:
            results = Resolver(b).map(ScreenTask(), rows)
    finally:
        server.close()
    for res, level in zip(results, ("中", "低"), strict=True):
        assert isinstance(res, ScreenResult), res
        assert Flag.NO_ANSWER in res.flags and res.risk_level.value == level
    assert results[0].revenue == pytest.approx(3.18, rel=0.01) and results[1].revenue == 1505.6
    assert ("timeout" if kind == "slow" else "maximum context length") in results[0].notes


def test_the_text_is_sized_to_the_engine_context(tmp_path):
    """vLLM's max_model_len and its /tokenize count decide how much of a long text the model gets."""
    sized = {}
    for context in (8192, 2048):
        def models(_, n=context):
            data = {"object": "list", "data": [{"id": "qwen", "object": "model", "root": "Qwen/Qwen3-8B",
                                                "max_model_len": n}]}
            return 200, "application/json", json.dumps(data).encode()

        server = MockServer({"/v1/models": models, "/tokenize": lambda body: (
            200, "application/json", json.dumps({"count": len(body["prompt"]) // 2}).encode())})
        try:
            settings = tiny_settings(tmp_path / str(context), engine_url=server.url, max_tokens=512)
            with Batcher.from_settings(settings, server.engine(settings), own_engine=True) as b:
                b.start()
                sized[context] = b.fit(ScreenTask()).text_limit
                assert b.tokens_per_char == pytest.approx(0.5, abs=0.01)
        finally:
            server.close()
    # 8k: bounded by text_tokens (1,500 tokens at ~0.5 a character, with a 10% margin)
    assert sized[8192] == int(1500 / (0.5 * 1.1)), sized
    # 2k: what is left after the answer (512), the system prompt and the row fits, and little more
    from xladdin.tasks.screen import SYSTEM_PROMPT

    used = 512 + len(SYSTEM_PROMPT) * 0.5 + sized[2048] * 0.5
    assert 1500 < used < 2048 and sized[2048] < sized[8192], sized


@pytest.mark.skipif(not REAL_PDF.is_file(), reason="../shared/data annual report not present")
def test_the_real_annual_report_gives_the_gold_figures(tiny_model_path, tmp_path):
    tables = read_tables(read_document(REAL_PDF))
    assert tables["revenue"].current == pytest.approx(11.7530103432)
    assert tables["net_profit"].current == pytest.approx(1.2946502068)
    assert tables["net_profit"].prior == pytest.approx(1.8222338713) and tables["net_profit"].change == -28.95
    assert tables["net_profit_deducted"].current == pytest.approx(1.2918873559)
    assert tables["operating_cash_flow"].current == pytest.approx(3.6910090849)
    assert tables["eps"].current == 0.62 and tables["roe"].current == 7.64
    assert tables["net_profit"].page == 5 and tables["eps"].page == 6
    pool = write_pool(tmp_path / "pool.csv", [["603339", "四方科技", "专用设备", "25", "", str(REAL_PDF)]])
    r = cli(["screen", str(pool), "-o", str(tmp_path / "real.json"), "--reports", str(REAL_PDF.parent)],
            tiny_model_path, tmp_path)  # its folder named: a report file there may be read
    assert r.returncode == 0, r.stderr[-2000:]
    (got,) = json.loads((tmp_path / "real.json").read_text(encoding="utf-8"))["rows"]
    assert got["净利润(亿元) net profit"] == pytest.approx(1.2946502068) and got["净利增长(%) profit growth"] == -28.95
    assert got["文本EPS(元) EPS in text"] == 0.62 and got["文本ROE(%) ROE in text"] == 7.64
    assert got["上年净利润(亿元) prior-year profit"] == pytest.approx(1.8222338713)
    assert "(第5页)" in got["出处 evidence"] and "亏损" not in got["标记 flags"] and got["风险等级 risk"] == "中"
    # the same file found in its folder by the code in its name, answered from the cache (the key is the text)
    pool2 = write_pool(tmp_path / "pool2.csv", [["603339", "四方科技", "专用设备", "25", ""]], header=POOL_HEADER[:5])
    r2 = cli(["screen", str(pool2), "--reports", str(REAL_PDF.parent), "-o", str(tmp_path / "r2.json")],
             tiny_model_path, tmp_path)
    assert r2.returncode == 0 and "1 rows, 1 from cache" in r2.stdout, r2.stderr[-800:]


@pytest.mark.skipif(not REAL_PDF.is_file(), reason="../shared/data annual report not present")
def test_the_real_annual_report_through_qwen_screen_with_its_path(tiny_engine, tmp_path):
    settings = tiny_settings(tmp_path, report_dirs=[REAL_PDF.parent])  # the reports' folder, allowed by the user
    runtime = CellRuntime(settings, batcher=Batcher.from_settings(settings, engine=tiny_engine))
    udfs.set_runtime(runtime)
    try:
        out = dict(zip(functions.SPILL_FIELDS, udfs.QWEN_SCREEN([[603339.0, "四方科技", "专用设备", 25.0, None, None,
                                                              str(REAL_PDF)]], False, None,
                                                            Caller(book=tmp_path / "pool.xlsx"))[0], strict=True))
    finally:
        udfs.set_runtime(None)
    assert out["net_profit"] == pytest.approx(1.2946502068) and out["eps_text"] == 0.62 and out["roe_text"] == 7.64
    assert out["net_profit_prev_text"] == pytest.approx(1.8222338713) and out["net_profit_growth"] == -28.95
    assert "(第6页)" in out["evidence"] and out["risk_level"] in ("中", "高", "低")


def test_a_whole_annual_report_as_a_cell_value(tiny_engine, tmp_path):
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine=tiny_engine))
    udfs.set_runtime(runtime)
    try:
        spilled = udfs.QWEN_SCREEN([[300617.0, "安靠智电", "电气设备", 30.0, None, None, long_report()]])[0]
    finally:
        udfs.set_runtime(None)
    out = dict(zip(functions.SPILL_FIELDS, spilled, strict=True))
    assert out["revenue"] == pytest.approx(3.18, rel=0.01) and out["net_profit"] == pytest.approx(0.636, rel=0.01)
    assert out["risk_level"] == "中" and "文本截断" in out["flags"]


def test_a_long_text_through_the_cli_against_a_server_that_refuses_it(tiny_model_path, tmp_path):
    server = Server({"/v1/models": vllm_models("Qwen/Qwen3-8B"), "/v1/chat/completions": (
        400, "application/json", b'{"error": {"message": "maximum context length is 8192 tokens"}}')})
    try:
        pool = write_pool(tmp_path / "long.csv", [["300617", "安靠智电", "电气设备", "30", "8", long_report()]],
                          header=("代码", "名称", "行业", "市盈率TTM", "ROE", "财报摘要"))
        r = cli(["screen", str(pool), "-o", str(tmp_path / "o.json")], tiny_model_path, tmp_path,
                XLADDIN_ENGINE_URL=server.url, XLADDIN_RETRIES="0")
    finally:
        server.close()
    assert r.returncode == 0 and "1 without a model answer" in r.stdout, (r.stdout, r.stderr[-800:])
    (got,) = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["rows"]
    assert got["风险等级 risk"] == "中" and "模型未作答" in got["标记 flags"]
    assert got["营收(亿元) revenue"] == pytest.approx(3.18, rel=0.01) and "maximum context length" in got["说明 notes"]
