"""Trust, fourth round (issue 64), each case as a user or an attacker meets it, through the CLI: no formula in
any workbook the product writes, no answer stored under another model than its own, a cache entry that does
not validate is a miss, a damaged night never stops the nights after it."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from typing import Any

import openpyxl
from conftest import Server, vllm_models
from kit import run_main
from test_user_trust import REFUSING, answering_server, refusing_server, write_csv

from xladdin.testing import screen_answer


def reply(content: str) -> tuple[int, str, bytes]:
    """A chat completion as vLLM answers it, served as ``qwen``, holding ``content``."""
    data = {"id": "c", "object": "chat.completion", "created": 0, "model": "qwen",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}
    return 200, "application/json", json.dumps(data, ensure_ascii=False).encode()


def answering(content: Callable[[], str]) -> Server:
    """A server of model org/Qwen3-8B answering every chat with ``content()``."""
    return Server({"/v1/models": vllm_models("org/Qwen3-8B"), "/v1/chat/completions": lambda _: reply(content())})


def screen_against(server: Server, monkeypatch, capsys, *args: Any) -> Any:
    """``xladdin ARGS`` in this process against ``server`` (no retries), the server closed after."""
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        return run_main(capsys, *args)
    finally:
        server.close()


FORMULAS = ("=1+1", '=HYPERLINK("http://evil.example/x","点此")', "=cmd|' /C calc'!A0")


def formula_cells(path) -> list[str]:
    """Every cell of every sheet of the workbook at ``path`` that holds a formula, as sheet!cell."""
    wb = openpyxl.load_workbook(path)
    return [f"{ws.title}!{c.coordinate}" for ws in wb.worksheets for row in ws.iter_rows() for c in row
            if c.data_type == "f"]


def texts(path) -> set[str]:
    wb = openpyxl.load_workbook(path)
    return {c.value for ws in wb.worksheets for row in ws.iter_rows() for c in row if isinstance(c.value, str)}


REPORT = ("主要会计数据 单位：万元 2023年 2022年 本期比上年同期增减(%) 2021年\n"
          "营业收入 52,310.50 48,002.10 8.98 40,100.00\n归属于上市公司股东的净利润 3,120.40 1,050.20 197.12 2,300.00")


def test_no_text_of_a_pool_or_a_report_becomes_a_formula_in_any_workbook_written(tmp_path, monkeypatch, capsys):
    rows = [("600001", FORMULAS[1], FORMULAS[0], "20", "12", REPORT),
            ("600002", "光伏乙", FORMULAS[0], "30", "8", REPORT),
            ("600003", "光伏丙", FORMULAS[2], "15", "16", REPORT)]
    pool = tmp_path / "pool.csv"
    import csv

    with pool.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["代码", "名称", "行业", "市盈率TTM", "ROE(%)", "财报摘要"])
        w.writerows(rows)
    r = screen_against(refusing_server(), monkeypatch, capsys,
                       "screen", pool, "-o", tmp_path / "r.xlsx", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert formula_cells(tmp_path / "r.xlsx") == []
    assert set(FORMULAS) <= texts(tmp_path / "r.xlsx")  # kept, as text: the Results and Summary sheets
    r = run_main(capsys, "compare", tmp_path / "r.xlsx", "--pool", pool, "-o", tmp_path / "c.xlsx")
    assert r.returncode == 0, r.stderr
    assert formula_cells(tmp_path / "c.xlsx") == []
    assert FORMULAS[0] in texts(tmp_path / "c.xlsx")


# ------------------------------------------------------------------ an answer stored under its own model only
def switching_router(after: int) -> Server:
    """A router on 127.0.0.1 keeping connections alive, serving both models as ``qwen`` (so an answer's own
    ``model`` field cannot tell them apart): model A for the first ``after`` answers, then model B, whose
    listing then names B. Each answer's reason says which model gave it."""
    answered = itertools.count()
    lock = threading.Lock()
    state = {"model": "org/Qwen3-8B"}

    def models(_body):
        return vllm_models(state["model"])

    def chat(_body):
        with lock:
            if next(answered) >= after:
                state["model"] = "org/Qwen3-4B"
            by = "A答" if state["model"] == "org/Qwen3-8B" else "B答"
        return reply(screen_answer(by))

    return Server({"/v1/models": models, "/v1/chat/completions": chat}, keep_alive=True)


def test_an_answer_of_another_model_behind_the_same_name_is_never_stored_under_this_one(tmp_path, monkeypatch,
                                                                                         capsys):
    rows = [(f"6000{i:02d}", f"公司{i}", "12", "20", f"营业收入{i}亿元") for i in range(12)]
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"), rows)
    monkeypatch.setenv("XLADDIN_OPENAI_HTTP__MAX_PARALLEL", "1")  # one answer at a time: A's 4 come before B's
    screen_against(switching_router(after=4), monkeypatch, capsys, "screen", pool, "-o", tmp_path / "one.json",
                   "--no-progress")
    first = json.loads((tmp_path / "one.json").read_text(encoding="utf-8"))["rows"]
    assert not any("B答" in str(row.get("理由 reason")) for row in first), first  # never shown as model A's
    refused = [row for row in first if row.get("错误 error")]
    assert refused and all("org/Qwen3-4B" in row["错误 error"] for row in refused), first  # the run says so
    # model A again, refusing every request: what comes back is what was stored under A's key, all A's own
    honest = Server({"/v1/models": vllm_models("org/Qwen3-8B"), "/v1/chat/completions": REFUSING})
    screen_against(honest, monkeypatch, capsys, "screen", pool, "-o", tmp_path / "two.json", "--no-progress")
    second = json.loads((tmp_path / "two.json").read_text(encoding="utf-8"))["rows"]
    stored = [row["理由 reason"] for row in second if "A答" in str(row.get("理由 reason"))
              or "B答" in str(row.get("理由 reason"))]
    assert stored and all("A答" in reason for reason in stored), second


# ------------------------------------------------------------------ a damaged cache entry is a miss, made again
def screened(tmp_path, monkeypatch, capsys, pool, name):
    r = screen_against(answering_server(), monkeypatch, capsys, "screen", pool, "-o", tmp_path / name, "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / name).read_text(encoding="utf-8"))
    verdicts = [{k: v for k, v in row.items() if k != "缓存命中 cached"} for row in report["rows"]]
    return verdicts, report["run"], r.stdout + r.stderr


def test_a_cache_entry_damaged_on_the_disk_is_a_miss_made_again_never_a_changed_figure(tmp_path, monkeypatch,
                                                                                        capsys):
    import diskcache

    rows = [(f"6005{i:02d}", f"公司{i}", "12", "20", f"营业收入{706.34 + i}亿元, 归母净利润{66.6 + i}亿元")
            for i in range(6)]
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"), rows)
    monkeypatch.setenv("XLADDIN_CACHE_DIR", str(tmp_path / "cache"))
    first, _, _ = screened(tmp_path, monkeypatch, capsys, pool, "one.json")
    with diskcache.Cache(str(tmp_path / "cache")) as store:  # one bit flipped in every stored answer but one,
        keys = list(store.iterkeys())  # and that one as an older version kept it (not sealed): a miss, no damage
        for key in keys[1:]:
            raw = bytearray(store.get(key))
            raw[len(raw) // 2] ^= 0x04
            store.set(key, bytes(raw))
        store.set(keys[0], {"reason": "an older version's answer"})
    again, run, out = screened(tmp_path, monkeypatch, capsys, pool, "two.json")
    assert again == first  # every row made again: the same verdicts, the same figures
    assert run["cache_hits"] == 0 and run["cache_damaged"] == len(keys) - 1 == len(rows) - 1, run
    assert f"{len(rows) - 1} damaged cache entries" in out, out
    third, run, _ = screened(tmp_path, monkeypatch, capsys, pool, "three.json")
    assert third == first and run["cache_hits"] == len(rows) and run["cache_damaged"] == 0, run


def test_random_bit_flips_in_the_cache_file_never_stop_a_run_nor_change_a_figure(tmp_path, monkeypatch, capsys):
    import random

    rows = [(f"6006{i:02d}", f"公司{i}", "12", "20", f"营业收入{706.34 + i}亿元") for i in range(4)]
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"), rows)
    monkeypatch.setenv("XLADDIN_CACHE_DIR", str(tmp_path / "cache"))
    first, _, _ = screened(tmp_path, monkeypatch, capsys, pool, "one.json")
    db = tmp_path / "cache" / "cache.db"
    pristine = db.read_bytes()
    chance = random.Random(64)
    for trial in range(6):
        damaged = bytearray(pristine)
        for _ in range(8):
            damaged[chance.randrange(len(damaged))] ^= 1 << chance.randrange(8)
        db.write_bytes(bytes(damaged))
        for side in ("cache.db-wal", "cache.db-shm"):
            (tmp_path / "cache" / side).unlink(missing_ok=True)
        again, _, _ = screened(tmp_path, monkeypatch, capsys, pool, f"t{trial}.json")
        assert again == first, trial


def test_a_pool_row_with_more_cells_than_its_header_is_screened_and_written_back_whole(tmp_path, monkeypatch,
                                                                                      capsys):
    pool = tmp_path / "pool.csv"  # a text holding a comma, not quoted: one cell more than the header
    pool.write_text("代码,名称,ROE,市盈率TTM,财报摘要\n600519,贵州茅台,30,25,营业收入1505亿元, 净利润747亿元\n"
                    "000858,五粮液,25,18,营业收入832亿元\n", encoding="utf-8")
    rows, _, _ = screened(tmp_path, monkeypatch, capsys, pool, "out.json")
    assert [r["名称"] for r in rows] == ["贵州茅台", "五粮液"]
    assert rows[0]["(第6列)"].strip() == "净利润747亿元" and rows[1]["(第6列)"] is None


# ------------------------------------------------------------------ the nights: none lost to a damaged one
NIGHT_ROWS = [("600001", "甲公司", "20", "15", "营业收入10亿元"), ("600002", "乙公司", "3", "40", "营业收入8亿元")]


def nightly(tmp_path, monkeypatch, capsys, pool, day, *extra):
    server = refusing_server()
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        return run_main(capsys, "nightly", pool, "--dir", tmp_path / "nights", "--date", day, "--no-progress",
                        *extra)
    finally:
        server.close()


def test_a_damaged_earlier_night_is_passed_over_with_its_reason_and_tonight_compared_with_the_one_before(
        tmp_path, monkeypatch, capsys):
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"), NIGHT_ROWS)
    assert nightly(tmp_path, monkeypatch, capsys, pool, "2021-05-06").returncode == 0
    good = tmp_path / "nights" / "2021-05-06.xlsx"
    (tmp_path / "nights" / "2021-05-07.xlsx").write_bytes(good.read_bytes()[:700])  # cut short last night
    (tmp_path / "nights" / "2021-05-08.xlsx").write_bytes(b"")  # and an empty one
    for day in ("2021-05-09", "2021-05-10"):  # tonight, and every night after
        r = nightly(tmp_path, monkeypatch, capsys, pool, day)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "nights" / f"{day}.changes.json").is_file()
        if day == "2021-05-09":
            assert "since 2021-05-06.xlsx" in r.stdout, r.stdout
            assert "2021-05-07.xlsx" in r.stderr and "2021-05-08.xlsx" in r.stderr, r.stderr
            assert "Traceback" not in r.stderr
    r = run_main(capsys, "diff", tmp_path / "nights" / "2021-05-07.xlsx", good)
    assert r.returncode == 2 and "2021-05-07.xlsx" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r


def test_a_night_after_today_is_refused_unless_asked_for(tmp_path, monkeypatch, capsys):
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"), NIGHT_ROWS)
    r = nightly(tmp_path, monkeypatch, capsys, pool, "2099-12-31")
    assert r.returncode == 2 and "2099-12-31 is after today" in r.stderr, r
    assert not (tmp_path / "nights" / "2099-12-31.xlsx").exists()
    assert nightly(tmp_path, monkeypatch, capsys, pool, "2099-12-31", "--allow-future").returncode == 0


def test_output_a_windows_console_cannot_encode_is_replaced_and_the_night_ends_whole(tmp_path):
    import os

    from kit import run_cli

    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"), NIGHT_ROWS)
    server = refusing_server()
    env = {**os.environ, "XLADDIN_ENGINE_URL": server.url, "XLADDIN_RETRIES": "0", "PYTHONIOENCODING": "cp1252"}
    try:
        for day in ("2021-05-06", "2021-05-07"):
            r = run_cli("nightly", pool, "--dir", tmp_path / "nights", "--date", day, "--no-progress", env=env)
            assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    finally:
        server.close()
    assert (tmp_path / "nights" / "2021-05-07.changes.json").is_file()


# ------------------------------------------------------------------ a report replaced in place is read again
def test_a_report_replaced_by_another_of_the_same_size_and_time_is_read_again(tmp_path, monkeypatch, capsys):
    import os

    reports = tmp_path / "reports"
    reports.mkdir()
    report = reports / "600001_年报.txt"
    table = ("2023年年度报告\n主要会计数据 单位：万元 2023年 2022年 本期比上年同期增减(%) 2021年\n"
             "营业收入 {0} 48,002.10 8.98 40,100.00\n")
    report.write_text(table.format("52,310.50") + "x" * 70_000 + "\n", encoding="utf-8")
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM"), [("600001", "甲公司", "12", "20")])
    monkeypatch.setenv("XLADDIN_CACHE_DIR", str(tmp_path / "cache"))

    def revenue() -> float:
        r = screen_against(refusing_server(), monkeypatch, capsys,
                           "screen", pool, "--reports", reports, "-o", tmp_path / "o.json", "--no-progress")
        assert r.returncode == 0, r.stderr
        return json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["rows"][0]["营收(亿元) revenue"]

    assert revenue() == 5.23105
    st = report.stat()
    report.write_text(table.format("61,310.50") + "x" * 70_000 + "\n", encoding="utf-8")  # the same size
    os.utime(report, ns=(st.st_atime_ns, st.st_mtime_ns))  # its time put back
    assert report.stat().st_size == st.st_size
    assert revenue() == 6.13105


# ------------------------------------------------------------------ no command writes over one of its inputs
def test_no_command_writes_over_its_inputs_and_every_output_is_checked_before_the_work(tmp_path, monkeypatch,
                                                                                       capsys):
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "行业", "ROE", "市盈率TTM", "gold_roe"),
                     [("600001", "甲公司", "电池", "12", "20", "12")])
    kept = pool.read_bytes()
    server = refusing_server()
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        assert run_main(capsys, "screen", pool, "-o", tmp_path / "r.xlsx", "--no-progress").returncode == 0
        r = run_main(capsys, "compare", tmp_path / "r.xlsx", "--pool", pool, "-o", pool)
        assert r.returncode == 2 and "xlsx" in r.stderr, r.stderr  # a .csv: refused by its suffix first
        pool_xlsx = tmp_path / "pool.xlsx"
        wb = openpyxl.Workbook()
        wb.active.append(["代码", "名称", "行业"])
        wb.active.append(["600001", "甲公司", "电池"])
        wb.save(pool_xlsx)
        before = pool_xlsx.read_bytes()
        r = run_main(capsys, "compare", tmp_path / "r.xlsx", "--pool", pool_xlsx, "-o", pool_xlsx)
        assert r.returncode == 2 and "one of the command's inputs (pool.xlsx)" in r.stderr, r.stderr
        assert pool_xlsx.read_bytes() == before
        asked = len(server.bodies)
        r = run_main(capsys, "eval", pool, "-o", pool, "--no-progress")
        assert r.returncode == 2 and pool.read_bytes() == kept, r.stderr
        r = run_main(capsys, "eval", pool, "-o", tmp_path / "e.xlsx", "--no-progress")
        assert r.returncode == 2 and "writes .json" in r.stderr and not (tmp_path / "e.xlsx").exists()
        assert len(server.bodies) == asked  # refused before anything was asked
        r = run_main(capsys, "eval", pool, "-o", tmp_path / "new" / "folder" / "e.json", "--no-progress")
        assert r.returncode in (0, 1) and (tmp_path / "new" / "folder" / "e.json").is_file(), r.stderr
    finally:
        server.close()


# ------------------------------------------------------------------ an HTTPS engine whose certificate is not trusted
def test_an_https_engine_with_a_self_signed_certificate_is_named_as_such_with_the_fix(tmp_path):
    import os
    import ssl
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from kit import run_cli

    from xladdin.cells.certs import ensure

    made = ensure(tmp_path / "certs", ("127.0.0.1",))
    listing = vllm_models("org/Qwen3-8B")[2]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(listing)))
            self.end_headers()
            self.wfile.write(listing)

        do_POST = do_GET

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(made.cert, made.key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM"), [("600001", "甲公司", "12", "20")])
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    env.update(XLADDIN_ENGINE_URL=f"https://127.0.0.1:{httpd.server_address[1]}/v1", XLADDIN_RETRIES="0")
    try:
        r = run_cli("screen", pool, "-o", tmp_path / "o.json", "--no-progress", env=env)
        assert r.returncode == 2 and "certificate is not trusted" in r.stderr and "SSL_CERT_FILE" in r.stderr, r
        assert "engine offline" not in r.stderr
        trusted = {**env, "SSL_CERT_FILE": str(made.ca)}
        r = run_cli("screen", pool, "-o", tmp_path / "o.json", "--no-progress", env=trusted)
        assert "certificate" not in r.stderr, r.stderr  # trusted: the server is reached (its chat is no chat)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_row_failing_tonight_is_one_change_and_duplicate_codes_sorted_otherwise_are_the_same_rows(
        tmp_path, monkeypatch, capsys):
    header = ("代码", "名称", "ROE", "市盈率TTM", "财报摘要")
    rows = [("600001", "甲公司", "20", "15", "营业收入10亿元"), ("600002", "乙公司A类", "3", "40", "营业收入8亿元"),
            ("600002", "乙公司B类", "20", "12", "营业收入9亿元")]
    pool = write_csv(tmp_path / "pool.csv", header, rows)
    assert nightly(tmp_path, monkeypatch, capsys, pool, "2021-05-06").returncode == 0
    write_csv(pool, header, [rows[2], ("600001", "甲公司", "20", "abc", "营业收入10亿元"), rows[1]])  # sorted otherwise
    r = nightly(tmp_path, monkeypatch, capsys, pool, "2021-05-07")
    changes = json.loads((tmp_path / "nights" / "2021-05-07.changes.json").read_text(encoding="utf-8"))
    assert [(c["change"], c["code"], c["level"]["now"]) for c in changes["rows"]] == [
        ("变化 changed", "600001.SH", "错误")], changes  # one row, now an error: not one leaving and one new
    assert changes["codes_twice"] == ["600002"] and "600002" in r.stdout, r.stdout
    assert r.returncode == 1 | 4  # a row failed, rows changed: never a false 新高


# ------------------------------------------------------------------ pools as users save them
def test_pools_as_users_save_them_are_read_as_meant_or_named_in_one_line(tmp_path, monkeypatch, capsys):
    csv_pool = write_csv(tmp_path / "codes.csv", ("代码", "名称", "ROE", "市盈率TTM"),
                         [("600519.0", "贵州茅台", "30", "25"), ("合计", "", "", "")])
    server = refusing_server()
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        monkeypatch.setenv("XLADDIN_RETRIES", "0")
        r = run_main(capsys, "screen", csv_pool, "-o", tmp_path / "a.json", "--no-progress")
        assert r.returncode == 0, r.stderr  # the code as a number's text is read; the totals row is no row
        rows = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))["rows"]
        assert [row["代码 code"] for row in rows] == ["600519.SH"]
        assert "not a row: 合计行" in r.stderr

        wb = openpyxl.Workbook()  # an industry merged over three rows, an ROE a formula never computed
        ws = wb.active
        ws.append(["代码", "名称", "行业", "ROE", "市盈率TTM"])
        ws.append(["600001", "甲公司", "电池", 12, 20])
        ws.append(["600002", "乙公司", None, "=10+2", 18])
        ws.append(["600003", "丙公司", None, 15, 22])
        ws.merge_cells("C2:C4")
        wb.save(tmp_path / "merged.xlsx")  # openpyxl stores no value for a formula
        r = run_main(capsys, "screen", tmp_path / "merged.xlsx", "-o", tmp_path / "b.json", "--no-progress")
        rows = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))["rows"]
        assert [row["行业"] for row in rows] == ["电池", "电池", "电池"]
        assert "1 formula cells have no saved value" in r.stderr, r.stderr

        (tmp_path / "locked.xlsx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 1024)
        r = run_main(capsys, "screen", tmp_path / "locked.xlsx", "-o", tmp_path / "c.json", "--no-progress")
        assert r.returncode == 2 and "password-protected" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    finally:
        server.close()


# ------------------------------------------------------------------ what the model says: numbers in a reason
def test_a_number_in_the_model_s_reason_is_shown_only_with_a_source(tmp_path, monkeypatch, capsys):
    def server_saying(reason: str) -> Server:
        return answering(lambda: screen_answer(reason))

    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"),
                     [("600519", "贵州茅台", "30", "25", "营业收入1505.60亿元，同比增长18.04%。")])
    monkeypatch.setenv("XLADDIN_RETRIES", "0")
    for reason, kept in (("营收888.8亿元,净利66.6亿", False), ("营收增长18.04%, 盈利稳健", True)):
        monkeypatch.setenv("XLADDIN_CACHE_DIR", str(tmp_path / reason))
        r = screen_against(server_saying(reason), monkeypatch, capsys,
                           "screen", pool, "-o", tmp_path / "o.json", "--no-progress")
        assert r.returncode == 0, r.stderr
        row = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["rows"][0]
        if kept:
            assert row["理由 reason"] == reason
        else:
            assert "888.8" not in row["理由 reason"] and "66.6" not in row["理由 reason"], row
            assert "888.8, 66.6 在原文与所给字段中都找不到" in row["说明 notes"], row["说明 notes"]


def test_the_night_s_printout_lists_each_changed_row_with_its_cause(tmp_path, monkeypatch, capsys):
    header = ("代码", "名称", "ROE", "市盈率TTM", "财报摘要")
    pool = write_csv(tmp_path / "pool.csv", header, NIGHT_ROWS)
    assert nightly(tmp_path, monkeypatch, capsys, pool, "2021-05-06").returncode == 0
    write_csv(pool, header, [("600001", "甲公司", "3", "15", "营业收入10亿元"), NIGHT_ROWS[1]])
    r = nightly(tmp_path, monkeypatch, capsys, pool, "2021-05-07")
    assert r.returncode == 4, r.stderr
    listed = [line for line in r.stdout.splitlines() if line.startswith("  ")]
    assert len(listed) == 1 and listed[0].split("\t")[:3] == ["  新高", "600001.SH", "甲公司"], r.stdout
    assert "风险 低 → 高" in listed[0] and "ROE 20 → 3" in listed[0] and "依据: ROE 3% < 5%" in listed[0]


# ------------------------------------------------------------------ a long wait shows progress
def slow_server(delay: float) -> Server:
    import time as _time

    return answering(lambda: _time.sleep(delay) or screen_answer())


def test_without_a_bar_a_long_run_says_how_far_it_is_now_and_then(tmp_path, monkeypatch, capsys):
    from xladdin.jobs import pool_screen

    monkeypatch.setattr(pool_screen, "LINE_S", 0.3)  # a minute, made short
    rows = [(f"6007{i:02d}", f"公司{i}", "12", "20", "营业收入10亿元") for i in range(4)]
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"), rows)
    monkeypatch.setenv("XLADDIN_OPENAI_HTTP__MAX_PARALLEL", "1")
    r = screen_against(slow_server(0.4), monkeypatch, capsys,
                       "screen", pool, "-o", tmp_path / "o.json", "--no-progress")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("screen: ")]
    assert len(lines) >= 2 and "/4 rows" in lines[0] and "rows/s after" in lines[0], r.stderr


def test_on_a_terminal_the_bar_moves_before_the_first_row_is_answered(tmp_path):
    import os
    import pty
    import subprocess
    import time

    from kit import cli_command

    rows = [(f"6008{i:02d}", f"公司{i}", "12", "20", "营业收入10亿元") for i in range(2)]
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM", "财报摘要"), rows)
    server = slow_server(3.0)
    main, child = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a terminal 120 wide
    env = {**os.environ, "XLADDIN_ENGINE_URL": server.url, "XLADDIN_OPENAI_HTTP__MAX_PARALLEL": "1"}
    proc = subprocess.Popen(cli_command("screen", pool, "-o", tmp_path / "o.json"), env=env, stdin=child,
                            stdout=child, stderr=child, close_fds=True)
    os.close(child)
    seen, began = b"", time.monotonic()
    try:
        while time.monotonic() - began < 60 and proc.poll() is None:
            try:
                part = os.read(main, 4096)
            except OSError:
                break
            seen += part
            if any(b"0/2" in frame and b"errors=0" in frame for frame in seen.split(b"\r")):
                break  # a frame of the bar with its counts, no row answered yet
        assert any(b"0/2" in frame and b"errors=0" in frame for frame in seen.split(b"\r")), seen[-400:]
    finally:
        proc.kill()
        proc.wait()
        os.close(main)
        server.close()
