"""As of a day, a real annual report is used only once it was public: its publication day read from the
report's own statements (its approval, its auditor's signature), never from a sentence about something
else. Run on the real reports in ``../shared/data`` when they are there (never committed), each named
without a date, through the CLI."""

from __future__ import annotations

import datetime as dt
import json
import shutil

import pytest
from test_documents import cli
from test_nightly import rows_of, write_csv

from xladdin.periods import from_name, from_text
from xladdin.reading.documents import read_document

REPORTS = __import__("test_documents").SHARED / "annual_reports"
GOLD = REPORTS / "gold.jsonl"
real = pytest.mark.skipif(not GOLD.is_file(), reason="../shared/data annual reports not present")


def gold() -> list[dict]:
    return [json.loads(line) for line in GOLD.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.slow
@real
def test_each_real_report_s_day_is_after_its_year_and_before_the_next_summer():
    dated = 0
    for g in gold():
        path = REPORTS / g["file"]
        got = from_name(path.name).combined(from_text(read_document(path)))
        assert got.period is not None and got.period.year == g["year"], g["file"]
        if got.published is None:
            continue  # left out under --as-of: never a guess
        dated += 1
        assert dt.date(g["year"] + 1, 1, 1) <= got.published <= dt.date(g["year"] + 1, 6, 30), (g["file"], got)
    assert dated >= 0.9 * len(gold())


def test_a_sentence_about_something_else_is_no_publication_day():
    text = ("某某银行股份有限公司\n2021年年度报告\n项目于2021年12月7日取得施工许可。\n"
            "公司于2019年12月20日召开董事会，审议通过《关于收购的议案》。\n自2019年1月1日起执行新金融工具准则。\n"
            "本报告期内，公司于2021年6月1日召开董事会审议通过利润分配方案。")
    assert from_text(text).published is None
    # a day before the period ends is impossible (a typo of the year), and the auditor's day stands in
    typo = from_text("2014年年度报告\n董事会批准报送日期：2014 年 4 月 8 日\n中国注册会计师：张帆\n二〇一五年四月八日")
    assert (typo.published, typo.published_source) == (dt.date(2015, 4, 8), "正文: 审计报告日 (公告日不早于此)")


def test_of_a_file_name_and_its_text_that_disagree_the_later_day_wins_and_the_conflict_is_noted():
    got = from_name("2021-01-15__600519__2020年年度报告.pdf").combined(
        from_text("2020年年度报告\n董事会批准报送日期：2021年4月23日"))
    # the later is the board's approval, a lower bound: the report is taken as public from the deadline
    assert got.published == dt.date(2021, 4, 30) and "2021-01-15 (文件名)" in got.conflict


@real
@pytest.mark.slow
def test_as_of_the_real_reports_are_used_only_once_public_through_the_cli(tiny_model_path, tmp_path):
    rows = []
    for i, g in enumerate(gold()):
        name = f"r{i:02d}.pdf"  # no date in the name: the text must date it
        shutil.copyfile(REPORTS / g["file"], tmp_path / name)
        rows.append([g["code"], g["name"], "电力", "20", "10", name])
    pool = write_csv(tmp_path / "pool.csv", rows, header=("代码", "名称", "行业", "市盈率TTM", "ROE", "报告文件"))
    years = [g["year"] for g in gold()]
    for day in (dt.date(2020, 1, 10), dt.date(2026, 12, 31)):
        out = tmp_path / f"{day}.json"
        r = cli(["screen", str(pool), "--as-of", day.isoformat(), "-o", str(out)], tiny_model_path, tmp_path,
                timeout=900)
        assert r.returncode in (0, 1), r.stderr[-2000:]
        for year, row in zip(years, rows_of(out), strict=True):
            used = "未用 " not in (row["说明 notes"] or "")
            if year + 1 > day.year:  # published in the year after its period: not public yet
                assert not used and row["报告期 period"] is None, row["说明 notes"]
            if used:
                assert dt.date.fromisoformat(row["公告日 published"]) <= day
        if day.year == 2026:
            used = sum("未用 " not in (row["说明 notes"] or "") for row in rows_of(out))
            assert used >= 0.9 * len(years)


def test_a_day_the_report_states_as_its_disclosure_is_its_day_an_approval_only_a_lower_bound():
    stated = from_text("2022年年度报告\n董事会批准报送日期：2023年4月24日\n"
                       "内部控制评价报告全文披露日期 2023 年 04 月 26 日")
    assert (stated.published, stated.published_source, stated.lower) == (
        dt.date(2023, 4, 26), "正文: 内部控制评价报告全文披露日期", False)
    cover = from_text("证券代码：600001 公告编号：2023-012\n某某股份有限公司\n2022年年度报告\n2023年4月26日\n\f……")
    assert (cover.published, cover.lower) == (dt.date(2023, 4, 26), False)
    board = from_name("600001_2022年报.pdf").combined(from_text("2022年年度报告\n董事会批准报送日期：2023年3月24日"))
    assert board.published == dt.date(2023, 4, 30)  # the statutory deadline: public by then for certain
    assert board.published_source == "法定披露期限; 正文: 董事会批准报送日期 2023-03-24 只是下限"
    late = from_name("600001_2022年报.pdf").combined(from_text("2022年年度报告\n董事会批准报送日期：2023年6月20日"))
    assert late.published == dt.date(2023, 6, 20) and "晚于法定披露期限 2023-04-30" in late.published_source
    half = from_name("600001_2023年半年度报告.pdf").combined(
        from_text("2023年半年度报告\n董事会批准报送日期：2023年8月10日"))
    assert half.published == dt.date(2023, 8, 31)
    unknown = from_name("report.pdf").combined(from_text("董事会批准报送日期：2023年3月24日"))
    assert unknown.published is None and "只知公告日不早于 2023-03-24" in unknown.not_public(dt.date(2024, 1, 1))
    sse = from_name("600519_20210423_1234.pdf")  # the SSE site's name: code, day, a number
    assert (sse.published, sse.published_source) == (dt.date(2021, 4, 23), "文件名")


@real
@pytest.mark.slow
def test_as_of_the_day_before_a_real_report_became_public_it_is_never_used_on_its_day_it_is(tiny_model_path,
                                                                                            tmp_path):
    """百普赛斯 2022 states its day (内部控制评价报告全文披露日期 2023-04-26; its board and auditor 04-24);
    沙河股份 2003 only its auditor's and cover's (2004-03-26): used from the deadline, 2004-04-30."""
    files = {"301080_百普赛斯_2022.pdf": ("2023-04-25", "2023-04-26"),
             "000014_沙河股份_2003.pdf": ("2004-04-29", "2004-04-30")}
    rows = []
    for i, name in enumerate(files):
        shutil.copyfile(REPORTS / name, tmp_path / f"r{i}.pdf")  # no date in the name: the text dates it
        rows.append([name[:6], name.split("_")[1], "其他", "20", "10", f"r{i}.pdf"])
    pool = write_csv(tmp_path / "pool.csv", rows, header=("代码", "名称", "行业", "市盈率TTM", "ROE", "报告文件"))
    for at, (name, (before, on)) in enumerate(files.items()):
        for day, wanted in ((before, False), (on, True)):
            out = tmp_path / f"{day}.json"
            r = cli(["screen", str(pool), "--as-of", day, "-o", str(out)], tiny_model_path, tmp_path, timeout=900)
            assert r.returncode in (0, 1), r.stderr[-2000:]
            row = rows_of(out)[at]
            assert ("未用 " not in (row["说明 notes"] or "")) is wanted, (name, day, row["说明 notes"])
            if wanted:
                assert row["公告日 published"] == on, row


def test_a_board_meeting_s_date_beside_the_notice_number_is_no_day_of_disclosure():
    said = from_text("证券代码：600001 公告编号：2023-012\n2022年年度报告摘要\n"
                     "公司于2023年3月24日召开董事会，审议通过本报告。")
    assert said.lower and said.published == dt.date(2023, 3, 24)  # a lower bound only, not the cover's day
