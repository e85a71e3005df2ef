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
    assert got.published == dt.date(2021, 4, 23) and "2021-01-15 (文件名)" in got.conflict


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
