"""The Office add-in's functions.js in a real browser (Debian's Chromium, headless, driven by
Playwright) against the live cell service over HTTPS: Microsoft's own custom functions runtime
(``@microsoft/office-js``'s ``custom-functions-runtime.js``) holds the functions, and a stand-in for
Excel's host (``office_host.js``: the runtime's native bridge) sends it invocations as Excel does on a
recalculation — every declared parameter, null where left out, and the runtime adds its invocation
object last — and reads the results the runtime sends back. 500 cells at once, then the same cells
again; the WPS adapter on the same client; and the service stopped under pending calls. Skipped
without Chromium, Playwright or the npm package (``cd office && npm install``)."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("cryptography")
playwright = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")

from conftest import tiny_settings  # noqa: E402
from test_cells import WIDTH, overloaded_while, row, start  # noqa: E402

from xladdin.core.batcher import Batcher  # noqa: E402
from xladdin.sheet import functions  # noqa: E402
from xladdin.sheet.functions import CellRuntime  # noqa: E402
from xladdin.testing import ScriptedEngine, screen_answer  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
RUNTIME = Path(__file__).parent.parent / "office" / "node_modules" / "@microsoft" / "office-js" / "dist" / \
    "custom-functions-runtime.js"
pytestmark = [
    pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason="Chromium is not installed (apt-get install chromium)"),
    pytest.mark.skipif(not RUNTIME.is_file(), reason="@microsoft/office-js is not installed (cd office; npm install)"),
]
HOST = Path(__file__).parent / "office_host.js"
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8">
<script src="/test/office_host.js"></script>
<script src="/test/custom-functions-runtime.js"></script>
<script src="/addin/functions.js"></script></head><body>recalculation</body></html>"""
HOLD = 603999  # a row whose answer waits (the service is stopped under it)


def browser_page(url: str):
    """A page on the service's own origin (the add-in's), with Office's runtime and functions.js."""
    pw = playwright.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
    context = browser.new_context(ignore_https_errors=True)  # the test's own authority is not the system's
    page = context.new_page()
    page.route("**/test/page.html", lambda r: r.fulfill(status=200, content_type="text/html", body=PAGE))
    page.route("**/test/office_host.js",
               lambda r: r.fulfill(status=200, content_type="application/javascript", path=str(HOST)))
    page.route("**/test/custom-functions-runtime.js",
               lambda r: r.fulfill(status=200, content_type="application/javascript", path=str(RUNTIME)))
    sent: list[str] = []
    page.on("request", lambda req: sent.append(req.url.split("/", 3)[-1]) if "/api/" in req.url else None)
    page.goto(url.replace("127.0.0.1", "localhost") + "/test/page.html")
    page.wait_for_function("window.XladdinCells && window.XladdinCells.client")
    return pw, browser, page, sent


RECALCULATE = """async (rows) => {
  // =XLADDIN.QWEN_SCREEN(A2:G2) in a cell per row: header and rules left out, as Excel passes them
  return await OfficeHost.recalculate(rows.map((r, i) => ({fn: "QWEN_SCREEN", args: [[r], null, null],
                                                         address: "Sheet1!H" + (i + 2)})));
}"""


@pytest.mark.slow
def test_500_cells_in_one_recalculation_go_out_in_a_few_requests_and_the_second_asks_no_engine(tmp_path):
    gate = threading.Event()

    def respond(messages):
        if str(HOLD) in messages[-1]["content"]:
            gate.wait(60)
        return screen_answer()

    engine = ScriptedEngine(respond, delay=0.005, max_parallel=16)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, _ = start(runtime, tmp_path)
    pw, browser, page, sent = browser_page(running.url)
    try:
        rows = [row(i) for i in range(500)]
        first = page.evaluate(RECALCULATE, rows)
        assert len(first) == 500 and all(len(v) == 1 and len(v[0]) == WIDTH for v in first)
        assert all(v[0][0] == f"{600000 + i}.SH" and v[0][2] in ("低", "中", "高") for i, v in enumerate(first))
        posts, polls = sent.count("api/calls"), sent.count("api/settle")
        assert posts == 1 and polls <= 20, sent  # 500 calls: one POST, a handful of long polls
        asked = len(engine.calls)
        assert asked == 500

        sent.clear()
        second = page.evaluate(RECALCULATE, rows)  # the same cells recalculated (a row inserted, a group opened)
        assert second == first and len(engine.calls) == asked  # 0 engine requests
        assert sent == ["api/calls"]  # all 500 from memory in the one POST, nothing to poll

        # WPS: its adapter on the same functions.js (synchronous functions: the placeholder, then a recalculation)
        page.add_script_tag(url="/addin/wps/main.js")
        page.wait_for_function("window.XladdinWpsAdapter && window.QWEN_SCREEN")
        wps = page.evaluate("""async (r) => {
          let recalcs = 0;
          const app = { CalculateFull: () => { recalcs += 1; } };
          const w = XladdinWpsAdapter(XladdinCells, app);
          const before = w.functions.QWEN_SCREEN([r]);
          while (!recalcs) await new Promise((ok) => setTimeout(ok, 20));
          return { before, after: w.functions.QWEN_SCREEN([r]), recalcs };
        }""", row(1000))
        assert wps["before"] == [[functions.PENDING]] and len(wps["after"][0]) == WIDTH and wps["recalcs"] == 1

        # the service stopped under a pending call: the cell gets an error value, never hangs
        before = len(engine.calls)
        page.evaluate("(r) => { window.held = OfficeHost.recalculate([{fn: 'QWEN_SCREEN', args: [[r], null, null]}]); }"
                      ,
                      row(HOLD - 600000))
        for _ in range(200):  # until the engine has the call and the page holds a poll for it
            if len(engine.calls) > before:
                break
            page.wait_for_timeout(50)
        page.wait_for_timeout(300)
        running.stop()
        value = page.evaluate("async () => (await window.held)[0]")
        assert value[0][0].startswith("#QWEN!") and "cell service" in value[0][0]
        after = page.evaluate("async () => (await OfficeHost.recalculate([{fn: 'QWEN', args: ['x', null]}]))[0]")
        assert after.startswith("#QWEN! cell service unreachable")
    finally:
        gate.set()
        browser.close()
        pw.stop()
        running.stop()
        runtime.close(abort=True)


@pytest.mark.slow
def test_a_host_whose_fetch_reads_no_stream_settles_over_long_polls_to_the_same_values(tmp_path):
    """Chromium's fetch reads a response as it arrives: the client settles its pending calls over one stream
    each batch. A host without that (no ReadableStream / TextDecoder) long-polls instead: the same values."""
    engine = ScriptedEngine(lambda messages: screen_answer(), delay=0.05, max_parallel=4)  # longer than a POST's 0.2 s
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, _ = start(runtime, tmp_path)
    pw, browser, page, sent = browser_page(running.url)
    try:
        assert page.evaluate("XladdinCells.client.stream") is True
        streamed = page.evaluate(RECALCULATE, [row(i) for i in range(40)])
        assert sent.count("api/settle") == 1, sent  # one stream for the batch's 40 pending calls
        page.evaluate("XladdinCells.client.stream = false")
        sent.clear()
        polled = page.evaluate(RECALCULATE, [row(i) for i in range(40, 80)])
        assert sent.count("api/settle") >= 1 and len(engine.calls) == 80
        assert [v[0][0] for v in streamed + polled] == [f"{600000 + i}.SH" for i in range(80)]
        assert all(len(v[0]) == WIDTH and v[0][2] in ("低", "中", "高") for v in streamed + polled)
    finally:
        browser.close()
        pw.stop()
        running.stop()
        runtime.close(abort=True)


def test_a_cell_whose_engine_was_down_gets_its_verdict_on_one_recalculation_once_it_is_back(tmp_path):
    """Through the runtime's dispatch and the settle stream: the engine down, the cell an error value;
    the engine back and the error's time over, one recalculation gives the verdict (the stream waits for
    the call's new outcome, never the old error: issue 45's stale error)."""
    fail = threading.Event()
    fail.set()
    engine = ScriptedEngine(overloaded_while(fail), delay=0.05)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path, retries=0), engine, own_engine=True))
    running, _ = start(runtime, tmp_path)
    pw, browser, page, sent = browser_page(running.url)
    try:
        error = page.evaluate(RECALCULATE, [row(1)])[0]
        assert error[0][0].startswith("#QWEN! engine error 503"), error
        fail.clear()  # the engine is back
        runtime.error_ttl = 0  # and the error's 30 s are over
        sent.clear()
        verdict = page.evaluate(RECALCULATE, [row(1)])[0]
        assert verdict[0][0] == "600001.SH" and verdict[0][2] in ("低", "中", "高"), verdict
        assert "api/settle" in sent and len(engine.calls) == 2  # pending, then settled over the stream
    finally:
        browser.close()
        pw.stop()
        running.stop()
        runtime.close(abort=True)


def test_wps_s_page_at_the_entry_s_url_calls_with_the_key_the_entry_carries(tmp_path, monkeypatch):
    """WPS opens the URL ``xladdin cells wps`` writes in jsplugins.xml: with a key set, the page at it
    (``/addin/wps/``: main.js, then functions.js) sends the key from the URL's fragment, so its calls
    are answered, not refused 401 (issue 45)."""
    import xml.etree.ElementTree as ET

    from xladdin.cli.main import main

    engine = ScriptedEngine(lambda messages: screen_answer())
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, _ = start(runtime, tmp_path, key="s3cret")
    base = running.url.replace("127.0.0.1", "localhost")
    monkeypatch.setenv("XLADDIN_CELLS_KEY", "s3cret")
    plugins = tmp_path / "jsplugins.xml"
    assert main(["cells", "wps", "--jsplugins", str(plugins), "--url", base]) == 0
    url = ET.fromstring(plugins.read_text(encoding="utf-8")).find("jspluginonline").get("url")
    assert url == base + "/addin/wps/#key=s3cret"
    pw = playwright.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
    try:
        page = browser.new_context(ignore_https_errors=True).new_page()
        sent: list[str] = []
        page.on("request", lambda req: sent.append(req.url))
        page.goto(url)  # as WPS opens the add-in
        page.wait_for_function("window.XladdinWps && window.QWEN_SCREEN")
        assert page.evaluate("XladdinWps.client.key") == "s3cret"
        value = page.evaluate("async (r) => await XladdinWps.client.call('QWEN_SCREEN', [[r]])", row(5))
        assert value[0][0] == "600005.SH" and len(value[0]) == WIDTH, value
        assert len(engine.calls) == 1 and not [u for u in sent if "s3cret" in u or "?" in u]
    finally:
        browser.close()
        pw.stop()
        running.stop()
        runtime.close(abort=True)


def test_every_function_takes_what_excel_passes_its_declared_parameters_and_the_invocation_last(tmp_path):
    """Excel passes every declared parameter (null where the cell left it out) and the runtime adds
    its invocation object: no function may count that object as an argument. Each function's request
    goes to the engine once: a recalculation when it settles finds its fate (a request whose input held
    a range once had none, and the service asked it again on every recalculation, in a loop)."""

    def respond(messages):
        text = messages[-1]["content"]
        if "同比增长5%" in text:
            return json.dumps({"highlights": ["营业收入10亿元，同比增长5%"]}, ensure_ascii=False)
        if "一句话说明" in text:
            return json.dumps({"answer": "一句话"}, ensure_ascii=False)
        if "业绩大增" in text:
            return json.dumps({"label": "好"}, ensure_ascii=False)
        if "营业收入10亿元" in text:
            return json.dumps({"figure": "10亿元"}, ensure_ascii=False)
        return screen_answer()

    engine = ScriptedEngine(respond, max_parallel=4)
    runtime = CellRuntime(batcher=Batcher.from_settings(tiny_settings(tmp_path), engine, own_engine=True))
    running, _ = start(runtime, tmp_path)
    pw, browser, page, sent = browser_page(running.url)
    try:
        arity = page.evaluate("XladdinCells.ARITY")
        cells_ = [{"fn": "QWEN_STATUS", "args": []},
                  {"fn": "QWEN_SCREEN", "args": [[row(1)], None, None]},
                  {"fn": "QWEN", "args": ["一句话说明", None]},
                  {"fn": "QWEN_EXTRACT", "args": ["营业收入10亿元", "营业收入", None]},
                  {"fn": "QWEN_CLASSIFY", "args": ["业绩大增", "好,坏"]},
                  {"fn": "QWEN_HIGHLIGHTS", "args": ["营业收入10亿元，同比增长5%。", None, None]}]
        assert [len(c["args"]) for c in cells_] == [arity[c["fn"]] for c in cells_]
        values = page.evaluate("async (cells) => await OfficeHost.recalculate(cells)", cells_)
        for c, v in zip(cells_, values, strict=True):
            text = json.dumps(v, ensure_ascii=False)
            assert "#QWEN!" not in text and not (isinstance(v, dict) and "error" in v), (c["fn"], text)
        status = dict((r[0], r[1]) for r in values[0])
        assert len(values[0][0]) == 2 and "engine" in status  # QWEN_STATUS: a two-column table
        assert values[1][0][0] == "600001.SH" and values[1][0][2] in ("低", "中", "高")
        assert values[2:5] == ["一句话", 10, "好"] and "10亿元" in values[5]
        assert len(engine.calls) == 5  # one request each (QWEN_STATUS asks none)
    finally:
        browser.close()
        pw.stop()
        running.stop()
        runtime.close(abort=True)
