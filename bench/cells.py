"""The browser path against the CLI on the same rows and the same stand-in server (``python -m bench
cells``).

The browser arm is the Office add-in's path: a stand-in for Excel's host (``tests/office_host.js``, the
runtime's native bridge) sends one recalculation's invocations, a ``QWEN_SCREEN`` per cell, to
Microsoft's custom functions runtime in headless Chromium (Playwright, the system's browser), which
calls ``functions.js`` with its invocation object last, as Excel's host does; the client gathers the
calls into POSTs to the cell service (``xladdin cells serve`` in its own process, as the user starts it;
HTTPS on 127.0.0.1) and settles the pending ones over a settle stream per batch. Its time is the page's
own clock from the recalculation to the last cell's value (what the user waits for; Playwright's
carrying of the rows into the page and the values out is no part of it, and is kept beside as
``seconds_with_transfer``); then the same cells are recalculated once more (``cached_seconds``: every
value from the service's memory). The CLI arm is ``screen_file`` on a CSV of the same rows. Both reach
``bench/answer_server.py`` (answers after 10-50 ms, in its own process) with a fresh cache each.
Results: ``bench/results/cells.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .common import RESULTS
from .excel_path import FIELDS, against_cli

HEADLINE = ('cli_over_browser',)  # the numbers docs/BENCHMARKS.md gives for each earlier run

ROOT = Path(__file__).parent.parent
RUNTIME = ROOT / "office" / "node_modules" / "@microsoft" / "office-js" / "dist" / "custom-functions-runtime.js"
HOST = ROOT / "tests" / "office_host.js"
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><script src="/test/office_host.js"></script>
<script src="/test/custom-functions-runtime.js"></script><script src="/addin/functions.js"></script></head></html>"""
RECALCULATE = """async (rows) => {
  const cells = rows.map((r, i) => ({fn: "QWEN_SCREEN", args: [[r], null, null], address: "Sheet1!H" + (i + 2)}));
  const t0 = performance.now();
  const values = await OfficeHost.recalculate(cells);
  const ms = performance.now() - t0;
  const t1 = performance.now();
  const again = await OfficeHost.recalculate(cells);
  const cachedMs = performance.now() - t1;
  const errors = values.filter((v) => v.error || String(v[0][0]).startsWith("#QWEN")).length;
  const changed = again.filter((v, i) => JSON.stringify(v) !== JSON.stringify(values[i])).length;
  return { ms, cachedMs, errors, changed, values, stats: XladdinCells.client.stats };
}"""


@contextlib.contextmanager
def serving(engine_url: str, workdir: Path) -> Iterator[str]:
    """``xladdin cells serve`` in its own process, as the user starts it (any free port, its certificate in
    ``workdir``, the engine at ``engine_url``, a fresh cache, no user config): its URL while the block runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLADDIN_")}
    env.update(XLADDIN_ENGINE_URL=engine_url, XLADDIN_CACHE_DIR=str(workdir / "browser-cache"),
               XDG_CONFIG_HOME=str(workdir / "config"), PYTHONUNBUFFERED="1")
    command = [sys.executable, "-c", "import sys; from xladdin.cli.main import main; sys.exit(main())", "cells",
               "serve", "--port", "0", "--cert-dir", str(workdir / "cert"), "--rate", "1000"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()  # "cell service on https://HOST:PORT (the add-in: …)"
        m = re.search(r"on (https://\S+)", first)
        if m is None:
            proc.kill()
            raise RuntimeError(f"xladdin cells serve did not start: {first}{proc.communicate()[0]}")
        # the rest of its output read as it comes (a full pipe would stop the service at its next line)
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield m.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _engine_requests(url: str, ca: Path) -> int:
    """The service's count of requests asked of the engine (``/api/status``, its QWEN_STATUS table), over
    HTTPS verified by the service's own authority (``ca``)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(url + "/api/status", context=ctx, timeout=30) as r:
        table = json.load(r)["status"]
    return int(dict((row[0], row[1]) for row in table)["asked of the engine"])


def browser(url: str, workdir: Path, data: list[dict[str, Any]], chromium: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    values = [[r[k] for k in FIELDS] for r in data]
    with serving(url, workdir) as service_url:
        pw = sync_playwright().start()
        try:
            b = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
            page = b.new_context(ignore_https_errors=True).new_page()
            page.route("**/test/page.html", lambda r: r.fulfill(status=200, content_type="text/html", body=PAGE))
            page.route("**/test/office_host.js",
                       lambda r: r.fulfill(status=200, content_type="application/javascript", path=str(HOST)))
            page.route("**/test/custom-functions-runtime.js",
                       lambda r: r.fulfill(status=200, content_type="application/javascript", path=str(RUNTIME)))
            page.goto(service_url.replace("127.0.0.1", "localhost") + "/test/page.html")
            page.wait_for_function("window.XladdinCells && window.XladdinCells.client")
            page.unroute_all()  # the harness's files are in: the add-in's requests go to the service unintercepted
            t0 = time.perf_counter()
            out = page.evaluate(RECALCULATE, values)
            with_transfer = time.perf_counter() - t0
            b.close()
        finally:
            pw.stop()
        engine_requests = _engine_requests(service_url, workdir / "cert" / "ca.pem")
    stats = out["stats"]
    if out["changed"]:
        raise AssertionError(f"{out['changed']} cells changed on the cached recalculation")
    return {"rows": len(out["values"]), "seconds": round(out["ms"] / 1000, 3),
            "seconds_with_transfer": round(with_transfer, 3), "cached_seconds": round(out["cachedMs"] / 1000, 3),
            "errors": out["errors"], "posts": stats["posts"], "polls": stats["polls"],
            "engine_requests": engine_requests}


def render(d: dict[str, Any]) -> list[str]:
    """Section 16 of docs/BENCHMARKS.md."""
    lines = ["## 16. Excel for Mac and the web: the browser path against the CLI (`python -m bench cells`)", "",
             f"{d['rows']} `QWEN_SCREEN` cells, the same rows and the same stand-in server ({d['server']}), a fresh "
             "cache per run. The browser arm is the Office add-in in headless Chromium: Microsoft's custom functions "
             "runtime dispatching one recalculation as Excel's host does (the invocation object last), functions.js "
             "gathering the calls into POSTs to the cell service (`xladdin cells serve` in its own process, HTTPS on "
             "127.0.0.1) and settling the pending ones over a settle stream per batch; timed by the page's clock "
             "from the recalculation to the last cell's value, then the same cells recalculated once more (every "
             "value from the service's memory). The CLI arm is "
             f"`xladdin screen` on a CSV of the same rows. One run on {d['machine'].get('cpus')} CPUs, each arm "
             "first once and second once.", "",
             "| arm | seconds | errors | POSTs | settles | engine requests | recalculated again |",
             "|---|---|---|---|---|---|---|"]
    for r in d["runs"]:
        lines.append(f"| {r['arm']} | {r['seconds']} | {r['errors']} | {r.get('posts', '')} | {r.get('polls', '')} "
                     f"| {r.get('engine_requests', '')} | {r.get('cached_seconds', '')} |")
    lines += ["", f"The browser path runs at **{d['cli_over_browser']}** of the CLI's speed (best run of each; "
              "goal 0.9)" + (f": {d['note']}." if d.get("note") else "."), ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench cells", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=5400)
    p.add_argument("--delay-ms", default="10,50", help="the stand-in server's answer delay, low,high")
    p.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    p.add_argument("--out", default=str(RESULTS / "cells.json"))
    args = p.parse_args(argv)
    if not Path(args.chromium).is_file() or not RUNTIME.is_file():
        print("needs Chromium (apt-get install chromium), Playwright (pip install playwright) and "
              "@microsoft/office-js (cd office && npm install)")
        return 2
    against_cli("browser", lambda url, work, data: browser(url, work, data, args.chromium), args.rows,
                args.delay_ms, args.out, "browser path")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
