"""The nightly run: what changed since last night (``screen --compare``, ``xladdin diff``), through the CLI
with the tiny model. Levels and scores come from the rules, so the changes are worked out here by hand."""

from __future__ import annotations

import csv
import json
import subprocess

import pytest
from kit import run_cli
from test_documents import cli

pytestmark = pytest.mark.slow

HEADER = ("代码", "名称", "行业", "市盈率TTM", "ROE")


def diff(*args: str) -> subprocess.CompletedProcess:
    return run_cli("diff", *args, timeout=120)


def write_csv(path, rows, header=HEADER):
    with path.open("w", encoding="utf-8-sig", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


# score = clamp(round(100 − PE/100×20 − (15 − ROE)×5)); 高 ROE < 5; 中 5 ≤ ROE < 15 or PE > 50
LAST_NIGHT = [["600001", "甲", "银行", "10", "20"],   # 低 100
              ["600002", "乙", "银行", "20", "10"],   # 中 71
              ["600003", "丙", "医药", "20", "12"],   # 中 81
              ["600004", "丁", "医药", "30", "16"]]   # 低 99
TONIGHT = [["600005", "戊", "电子", "10", "8"],       # appeared: 中 63
           ["600003", "丙", "医药", "60", "12"],      # 中 73: the score changed
           ["600001", "甲", "银行", "10", "20"],      # the same
           ["600002", "乙", "银行", "20", "3"]]       # 高 36: new 高; 600004 left


def test_compare_lists_exactly_the_rows_that_changed_new_high_first(tiny_model_path, tmp_path):
    old = tmp_path / "yesterday.csv"
    r = cli(["screen", str(write_csv(tmp_path / "pool1.csv", LAST_NIGHT)), "-o", str(old)], tiny_model_path,
            tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    today = tmp_path / "today.json"
    r = cli(["screen", str(write_csv(tmp_path / "pool2.csv", TONIGHT)), "-o", str(today), "--compare", str(old)],
            tiny_model_path, tmp_path)
    assert r.returncode == 4, r.stderr[-2000:]  # every row screened, rows changed
    changes = json.loads(today.read_text(encoding="utf-8"))["changes"]
    got = [(c["change"], c["code"], c["level"]["before"], c["level"]["now"], c["score"]["before"], c["score"]["now"])
           for c in changes["rows"]]
    assert got == [("新高 new 高", "600002.SH", "中", "高", 71, 36),
                   ("变化 changed", "600003.SH", "中", "中", 81, 73),
                   ("新增 appeared", "600005.SH", None, "中", None, 63),
                   ("移出 left", "600004.SH", "低", None, 99, None)]
    assert changes["compared"] == 3 and "4 rows changed of 3 compared" in r.stdout

    # the same through `xladdin diff`, between a .csv and an .xlsx of tonight's run
    xlsx = tmp_path / "today.xlsx"
    r = cli(["screen", str(tmp_path / "pool2.csv"), "-o", str(xlsx), "--compare", str(old)], tiny_model_path,
            tmp_path)
    assert r.returncode == 4, r.stderr[-2000:]
    from openpyxl import load_workbook

    sheet = load_workbook(xlsx)["Changes"]
    assert [row[0].value for row in sheet.iter_rows(min_row=3)] == ["新高 new 高", "变化 changed", "新增 appeared",
                                                                  "移出 left"]
    out = tmp_path / "changes.json"
    r = diff(str(old), str(xlsx), "-o", str(out))
    assert r.returncode == 1, r.stderr[-2000:]
    assert [(c["change"], c["code"]) for c in json.loads(out.read_text(encoding="utf-8"))["rows"]] == \
        [(c[0], c[1]) for c in got]
    assert "评分 81 → 73" in r.stdout
    # the .json and the .xlsx of the same run: nothing changed
    r = diff(str(today), str(xlsx))
    assert r.returncode == 0 and "no changes: 4 rows compared" in r.stdout, r.stdout + r.stderr[-2000:]


def test_diff_names_a_file_that_is_no_report(tmp_path):
    (tmp_path / "x.json").write_text("{}", encoding="utf-8")
    r = diff(str(tmp_path / "x.json"), str(tmp_path / "missing.xlsx"))
    assert r.returncode == 2 and "x.json" in r.stderr


# ---- as of a date -------------------------------------------------------------------------------------------

BODY = "营业收入1,000.00亿元，同比增长10.00%。归属于上市公司股东的净利润500.00亿元。"


def report_txt(path, title, published_line, body=BODY):
    path.write_text(f"{title}\n{body}\n{published_line}\n", encoding="utf-8")
    return path


def rows_of(path):
    return json.loads(path.read_text(encoding="utf-8"))["rows"]


def test_a_report_published_after_as_of_is_not_used_and_the_row_says_so(tiny_model_path, tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    report_txt(reports / "2021-04-23__600519__2020年年度报告.txt", "贵州茅台2020年年度报告", "")
    report_txt(tmp_path / "2021-04-28__000858__2020年年度报告.txt", "五粮液2020年年度报告", "")
    pool = write_csv(tmp_path / "pool.csv", [["600519", "贵州茅台", "白酒", "40", "30", ""],
                                             ["000858", "五粮液", "白酒", "30", "25",
                                              "2021-04-28__000858__2020年年度报告.txt"]],
                     header=(*HEADER, "报告文件"))
    out = tmp_path / "as_of.json"
    r = cli(["screen", str(pool), "--reports", str(reports), "--as-of", "2021-03-31", "-o", str(out)],
            tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    first, second = rows_of(out)
    names = ("2021-04-23__600519__2020年年度报告.txt", "2021-04-28__000858__2020年年度报告.txt")
    for row, name in zip((first, second), names, strict=True):
        assert row["错误 error"] is None
        assert f"未用 {name}: 公告日 {name[:10]} (文件名) 晚于 as-of 2021-03-31" in row["说明 notes"]
        assert "数据缺失" in row["标记 flags"] and "公告日未知" not in row["标记 flags"]  # on its fields alone, no flag
        assert row["报告期 period"] is None and row["公告日 published"] is None and name not in row["阅读范围 read"]
    run = json.loads(out.read_text(encoding="utf-8"))["run"]
    assert run["as_of"] == "2021-03-31" and run["reports_left_out"] == 2

    # the same day after both were published: they are read, dated from their names
    later = tmp_path / "later.json"
    r = cli(["screen", str(pool), "--reports", str(reports), "--as-of", "2021-05-01", "-o", str(later)],
            tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    for row, day in zip(rows_of(later), ("2021-04-23", "2021-04-28"), strict=True):
        assert (row["报告期 period"], row["公告日 published"]) == ("2020年度", day)
        assert "公告日未知" not in row["标记 flags"] and "未用" not in row["说明 notes"]
        assert f"报告期 2020年度 (文件名); 公告日 {day} (文件名)" in row["说明 notes"]


def test_the_newest_report_published_by_the_date_is_chosen_from_a_folder_of_two_years(tiny_model_path, tmp_path):
    import os

    from test_documents import make_pdf

    reports = tmp_path / "reports"
    reports.mkdir()
    a2020 = report_txt(reports / "2021-04-23__600519__2020年年度报告.txt", "贵州茅台2020年年度报告", "")
    a2021 = report_txt(reports / "2022-03-31__600519__2021年年度报告.txt", "贵州茅台2021年年度报告", "")
    # dated by their text alone: the board's approval, and the date under the chairman at the end
    b2020 = report_txt(reports / "000001_2020年报.txt", "平安银行股份有限公司2020年年度报告",
                       "董事会批准报送日期：2021年2月1日")
    b2021 = make_pdf(reports / "000001_2021年报.pdf", [["平安银行股份有限公司2021年年度报告", "营业收入1,693.83亿元。"],
                                                       ["董事长：谢永林", "平安银行股份有限公司", "2022年3月9日"]])
    for older, newer in ((a2020, a2021), (b2020, b2021)):  # the older report touched last: mtime is no guide
        os.utime(newer, (1_600_000_000, 1_600_000_000))
        os.utime(older, (1_700_000_000, 1_700_000_000))
    pool = write_csv(tmp_path / "pool.csv", [["600519", "贵州茅台", "白酒", "40", "30"],
                                             ["000001", "平安银行", "银行", "5", "10"]])

    def chosen(day):
        out = tmp_path / f"{day}.json"
        r = cli(["screen", str(pool), "--reports", str(reports), "--as-of", day, "-o", str(out)], tiny_model_path,
                tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        return [(row["报告期 period"], row["公告日 published"], row["阅读范围 read"].split(":")[0])
                for row in rows_of(out)]

    # a day its text gives by an approval or a signature is only the earliest it was public: such a report is
    # used from its period's statutory deadline (annual reports: 4-30), never from the board's day
    assert chosen("2021-12-31") == [("2020年度", "2021-04-23", a2020.name), ("2020年度", "2021-04-30", b2020.name)]
    assert chosen("2022-03-20") == [("2020年度", "2021-04-23", a2020.name), ("2020年度", "2021-04-30", b2020.name)]
    assert chosen("2022-06-30") == [("2021年度", "2022-03-31", a2021.name), ("2021年度", "2022-04-30", b2021.name)]
    notes = rows_of(tmp_path / "2022-03-20.json")[0]["说明 notes"]
    assert "未用 2022-03-31__600519__2021年年度报告.txt: 公告日 2022-03-31 (文件名) 晚于 as-of 2022-03-20" in notes
    text_dated = rows_of(tmp_path / "2021-12-31.json")[1]["说明 notes"]
    assert ("报告期 2020年度 (文件名); 公告日 2021-04-30 (法定披露期限; 正文: 董事会批准报送日期 2021-02-01 只是下限)"
            in text_dated)
    assert ("未用 000001_2021年报.pdf: 公告日 2022-04-30 (法定披露期限; 正文: 董事长签署日 2022-03-09 只是下限) 晚于 "
            "as-of 2022-03-20") in rows_of(tmp_path / "2022-03-20.json")[1]["说明 notes"]


def test_a_pool_row_published_after_as_of_is_refused(tiny_model_path, tmp_path):
    pool = write_csv(tmp_path / "pool.csv", [["600519", "贵州茅台", "白酒", "40", "30", "2021-04-23", "2020年报"],
                                             ["000858", "五粮液", "白酒", "30", "25", "20210320", "20201231"],
                                             ["000001", "平安银行", "银行", "5", "10", "", ""]],
                     header=(*HEADER, "公告日期", "报告期"))
    out = tmp_path / "as_of.json"
    r = cli(["screen", str(pool), "--as-of", "2021-03-31", "-o", str(out)], tiny_model_path, tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]  # one row refused
    refused, public, undated = rows_of(out)
    assert refused["风险等级 risk"] is None
    assert "公告日期 2021-04-23 is after the as-of day 2021-03-31" in refused["错误 error"]
    assert public["错误 error"] is None and "公告日未知" not in public["标记 flags"]
    assert (public["报告期 period"], public["公告日 published"]) == ("2020年度", "2021-03-20")
    assert "公告日 2021-03-20 (列 公告日期)" in public["说明 notes"]
    assert undated["错误 error"] is None and "公告日未知" not in undated["标记 flags"]  # no report: its own fields
    # without --as-of every row is screened, each with its dates
    r = cli(["screen", str(pool), "-o", str(out)], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [(row["报告期 period"], row["公告日 published"]) for row in rows_of(out)] == [
        ("2020年度", "2021-04-23"), ("2020年度", "2021-03-20"), (None, None)]


# ---- reruns that reproduce ----------------------------------------------------------------------------------

VERDICT_SKIP = {"缓存命中 cached"}


def test_replay_of_a_report_gives_no_difference_and_names_the_rules_that_changed(tiny_model_path, tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    report_txt(reports / "2021-04-23__600519__2020年年度报告.txt", "贵州茅台2020年年度报告", "")
    pool = write_csv(tmp_path / "pool.csv", LAST_NIGHT)
    first = tmp_path / "night.json"
    r = cli(["screen", str(pool), "--reports", str(reports), "--as-of", "2021-06-30", "-o", str(first)],
            tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads(first.read_text(encoding="utf-8"))["run"]
    assert run["model_sha256"] and run["input_sha256"] and run["seed"] == 42 and run["as_of"] == "2021-06-30"
    assert run["task_version"] and run["rules"]["pe_limit"] == 50 and run["model_file"] == str(tiny_model_path)

    # the same engine on an empty cache: asked again, the same verdicts
    r = cli(["screen", "--replay", str(first), "--cache-dir", str(tmp_path / "empty")], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    assert "replay of night.json: 0 differences" in r.stdout and "0 from cache" in r.stdout
    assert (tmp_path / "night.replay.json").is_file()

    # other rules: the difference named, and the rows whose verdict changed
    rules = tmp_path / "rules.toml"
    rules.write_text("pe_limit = 25\n", encoding="utf-8")
    r = cli(["screen", "--replay", str(first), "--rules", str(rules), "-o", str(tmp_path / "again.json")],
            tiny_model_path, tmp_path)
    assert r.returncode == 4, r.stdout + r.stderr[-2000:]
    assert "differs: rules: pe_limit 50.0 → 25.0" in r.stdout
    assert "differs: 600004.SH 风险等级 risk: '低' → '中'" in r.stdout  # PE 30 > 25
    assert "600001.SH 风险等级" not in r.stdout  # PE 10


def test_the_embedded_engine_gives_the_same_verdicts_for_a_pool_in_another_order(tiny_model_path, tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    rows = LAST_NIGHT + [["600005", "戊", "电子", "10", "8"], ["600006", "己", "电子", "80", "3"]]
    for code, *_ in rows:
        report_txt(reports / f"2021-04-23__{code}__2020年年度报告.txt", f"{code}2020年年度报告",
                   f"营业收入{int(code[-1]) * 11}.50亿元。")
    verdicts = []
    for name, order in (("forward", rows), ("backward", rows[::-1])):
        out = tmp_path / f"{name}.json"
        r = cli(["screen", str(write_csv(tmp_path / f"{name}.csv", order)), "--reports", str(reports), "-o", str(out),
                 "--cache-dir", str(tmp_path / f"cache-{name}")], tiny_model_path, tmp_path)  # each on an empty cache
        assert r.returncode == 0 and "0 from cache" in r.stdout, r.stderr[-2000:]
        got = {row["代码 code"]: {k: v for k, v in row.items() if k not in VERDICT_SKIP and k not in HEADER}
               for row in rows_of(out)}
        verdicts.append(got)
    assert verdicts[0] == verdicts[1]


def test_screen_a_frame_as_of_a_date(tmp_path):
    import pandas as pd

    import xladdin
    from xladdin.core.batcher import Batcher
    from xladdin.core.cache import Cache
    from xladdin.testing import ScriptedEngine, screen_answer

    late = report_txt(tmp_path / "2021-04-28__000858__2020年年度报告.txt", "五粮液2020年年度报告", "")
    df = pd.DataFrame({"代码": ["600519", "000858", "000001"], "名称": ["贵州茅台", "五粮液", "平安银行"],
                       "ROE": [30, 25, 10], "市盈率TTM": [40, 30, 5],
                       "公告日期": ["2021-04-23", None, "2021-02-01"], "报告文件": [None, str(late), None]})
    with Batcher(ScriptedEngine(lambda _: screen_answer("稳健")), Cache(tmp_path / "c")) as b:
        out = xladdin.screen(df, batcher=b, progress=False, reports=tmp_path, as_of="2021-03-31")
    assert "is after the as-of day 2021-03-31" in out.loc[0, "错误 error"]
    assert f"未用 {late.name}" in out.loc[1, "说明 notes"] and "公告日未知" not in out.loc[1, "标记 flags"]
    assert out.loc[2, "公告日 published"] == "2021-02-01" and "公告日未知" not in out.loc[2, "标记 flags"]


def test_a_report_dated_only_by_its_text_is_read_once_under_as_of(tiny_model_path, tmp_path, monkeypatch, capsys):
    """``--as-of`` with a pool row naming a file that only its text dates: the core's reader processes read
    it, once; the screen's own request finds it read (it was read in this process first, then again)."""
    from kit import run_main

    from xladdin.reading import documents

    later = report_txt(tmp_path / "600519_2020年报.txt", "贵州茅台2020年年度报告", "董事会批准报送日期：2021年4月2日")
    header = (*HEADER, "报告文件")
    pool = write_csv(tmp_path / "pool.csv", [["600519", "贵州茅台", "白酒", "40", "30", later.name]], header)
    read_here = []
    real = documents.read_document  # a file parsed in this process, by any door's reading of it
    monkeypatch.setattr(documents, "read_document", lambda p, *a, **k: read_here.append(p) or real(p, *a, **k))
    for name, value in (("XLADDIN_MODEL", str(tiny_model_path)), ("XLADDIN_MAX_TOKENS", "64"),
                        ("XLADDIN_CACHE_DIR", str(tmp_path / "cache"))):
        monkeypatch.setenv(name, value)
    r = run_main(capsys, "screen", pool, "--as-of", "2021-03-31", "-o", tmp_path / "out.json", "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    row = rows_of(tmp_path / "out.json")[0]
    assert (f"未用 {later.name}: 公告日 2021-04-30 (法定披露期限; 正文: 董事会批准报送日期 2021-04-02 只是下限) 晚于 "
            "as-of 2021-03-31") in row["说明 notes"]
    run = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["run"]
    assert read_here == [] and run["files_read"] == 1  # read by a reader process, once


def test_reports_that_only_their_text_dates_are_read_once_by_readers_to_choose_one(tiny_model_path, tmp_path,
                                                                                    monkeypatch, capsys):
    """``--reports DIR --as-of`` over files dated only by their text: reader processes read them to choose
    (none is parsed in this process), and the one chosen is found read by the screen (from the store)."""
    from kit import run_main

    from xladdin.reading import documents

    reports = tmp_path / "reports"
    reports.mkdir()
    older = report_txt(reports / "000001_2020年报.txt", "平安银行股份有限公司2020年年度报告",
                       "董事会批准报送日期：2021年2月1日")
    report_txt(reports / "000001_2021年报.txt", "平安银行股份有限公司2021年年度报告",
               "董事会批准报送日期：2022年3月9日")
    pool = write_csv(tmp_path / "pool.csv", [["000001", "平安银行", "银行", "5", "10"]])
    read_here = []
    real = documents.read_document
    monkeypatch.setattr(documents, "read_document", lambda p, *a, **k: read_here.append(p) or real(p, *a, **k))
    for name, value in (("XLADDIN_MODEL", str(tiny_model_path)), ("XLADDIN_MAX_TOKENS", "64"),
                        ("XLADDIN_CACHE_DIR", str(tmp_path / "cache"))):
        monkeypatch.setenv(name, value)
    r = run_main(capsys, "screen", pool, "--reports", reports, "--as-of", "2021-12-31", "-o", tmp_path / "out.json",
                 "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    row = rows_of(tmp_path / "out.json")[0]
    assert (row["报告期 period"], row["公告日 published"]) == ("2020年度", "2021-04-30")
    assert row["阅读范围 read"].split(":")[0] == older.name
    run = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["run"]
    assert read_here == [] and (run["files_read"], run["files_from_store"]) == (0, 1)


def test_a_replay_whose_model_words_alone_differ_reports_them_apart_and_exits_as_reproduced(tmp_path, monkeypatch,
                                                                                           capsys):
    import itertools

    from conftest import Server, vllm_models
    from kit import run_main

    from xladdin.testing import screen_answer

    said = itertools.count()

    def chat(_body):  # every answer its own words: the verdict is the rules' and code's, the same each time
        words = screen_answer("说法" + "甲乙丙丁戊己庚辛"[next(said) % 8])
        data = {"id": "c", "object": "chat.completion", "created": 0, "model": "qwen",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": words}}]}
        return 200, "application/json", json.dumps(data, ensure_ascii=False).encode()

    server = Server({"/v1/models": vllm_models("org/Qwen3-8B"), "/v1/chat/completions": chat})
    pool = write_csv(tmp_path / "pool.csv", LAST_NIGHT)
    try:
        monkeypatch.setenv("XLADDIN_ENGINE_URL", server.url)
        assert run_main(capsys, "screen", pool, "-o", tmp_path / "night.json", "--no-progress").returncode == 0
        r = run_main(capsys, "screen", "--replay", tmp_path / "night.json", "--no-cache", "--no-progress")
    finally:
        server.close()
    assert r.returncode == 0, r.stdout  # no verdict differs: it reproduces
    assert "replay of night.json: 0 differences (none: the run reproduces)" in r.stdout
    assert "text differs: 600001.SH 理由 reason" in r.stdout and "in the model's words only" in r.stdout
