"""The folders users really have (issue 62), through the CLI: an exchange download of one company holds the
annual report beside its 摘要, its English version, a 更正公告, a corrected re-release and the quarterlies. The
report read is the newest period's full Chinese report public on the day; a notice never replaces it, a 摘要
or an English version is read only when nothing else is there, and every file passed over says why."""

from __future__ import annotations

import json

from test_trust_outputs import screen_against
from test_user_trust import refusing_server, write_csv

BODY = "营业收入1,000.00亿元，同比增长10.00%。归属于上市公司股东的净利润500.00亿元。"
ENGLISH = ("Kweichow Moutai Co., Ltd. 2020 Annual Report. The Board of Directors and all directors guarantee that "
           "the information in this annual report is true, accurate and complete, with no false records, "
           "misleading statements or material omissions. Operating revenue was RMB 97.99 billion. " * 2)


def cninfo_folder(folder):
    """One company's files as cninfo's download names them (day, code, title)."""
    folder.mkdir()
    files = {
        "2020-08-20__600519__2020年半年度报告.txt": "贵州茅台2020年半年度报告\n" + BODY,
        "2021-04-23__600519__2020年年度报告.txt": "贵州茅台2020年年度报告\n" + BODY,
        "2021-04-23__600519__2020年年度报告摘要.txt": "贵州茅台2020年年度报告摘要\n" + BODY,
        "2021-04-23__600519__2020 Annual Report.txt": ENGLISH,
        "2021-04-28__600519__关于2020年年度报告的更正公告.txt": "贵州茅台关于2020年年度报告的更正公告\n数据更正。",
        "2021-04-28__600519__2020年年度报告（更正后）.txt": "贵州茅台2020年年度报告\n" + BODY,
        "2021-04-29__600519__2021年第一季度报告.txt": "贵州茅台2021年第一季度报告\n" + BODY,
        "2021-04-23__000858__2020年年度报告摘要.txt": "五粮液2020年年度报告摘要\n" + BODY,
        "2021-04-23__000858__2020年年度报告（英文版）.txt": ENGLISH,
        "2021-04-30__000858__关于年度报告的补充公告.txt": "五粮液关于2020年年度报告的补充公告\n补充披露。",
    }
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def screened(tmp_path, monkeypatch, capsys, *args):
    pool = write_csv(tmp_path / "pool.csv", ("代码", "名称", "ROE", "市盈率TTM"),
                     [("600519", "贵州茅台", "30", "25"), ("000858", "五粮液", "25", "18")])
    r = screen_against(refusing_server(), monkeypatch, capsys, "screen", pool, "--reports", tmp_path / "reports",
                       "-o", tmp_path / "out.json", "--no-progress", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    return [((row["阅读范围 read"] or "").split(":")[0], row["说明 notes"] or "") for row in rows]


def test_as_of_each_day_the_report_read_is_the_newest_full_chinese_one_then_public(tmp_path, monkeypatch, capsys):
    cninfo_folder(tmp_path / "reports")
    (moutai, said), (wuliangye, other) = screened(tmp_path, monkeypatch, capsys, "--as-of", "2021-04-24")
    assert moutai == "2021-04-23__600519__2020年年度报告.txt", said
    assert "未用 2021-04-23__600519__2020年年度报告摘要.txt: 摘要, 已有全文" in said
    assert "未用 2021-04-23__600519__2020 Annual Report.txt: 英文版, 已有中文报告" in said
    assert "未用较旧报告期的 1 个文件" in said  # the half-year report
    assert "未用 2021-04-28__600519__2020年年度报告（更正后）.txt: 公告日 2021-04-28 (文件名) 晚于" in said
    # nothing but a 摘要 and an English version: the 摘要, and the row says so; the notice is not public yet
    assert wuliangye == "2021-04-23__000858__2020年年度报告摘要.txt", other
    assert "是摘要: 没有完整的中文年报" in other and "英文版, 已有中文报告" in other

    (moutai, said), (_, other) = screened(tmp_path, monkeypatch, capsys, "--as-of", "2021-04-28")
    assert moutai == "2021-04-28__600519__2020年年度报告（更正后）.txt", said  # the re-release from its own day
    assert "未用 2021-04-23__600519__2020年年度报告.txt: 已被修订版 2021-04-28__600519__2020年年度报告（更正后）.txt" \
           " 取代" in said
    assert "未用 2021-04-28__600519__关于2020年年度报告的更正公告.txt: 是公告 (更正/补充), 不是报告" in said

    (moutai, _), (wuliangye, other) = screened(tmp_path, monkeypatch, capsys, "--as-of", "2021-05-10")
    assert moutai == "2021-04-29__600519__2021年第一季度报告.txt"  # a newer period
    assert wuliangye == "2021-04-23__000858__2020年年度报告摘要.txt"  # a later notice never replaces it
    assert "关于年度报告的补充公告.txt: 是公告" in other


def test_without_a_day_a_notice_or_an_english_version_of_the_same_day_is_never_the_report(tmp_path, monkeypatch,
                                                                                           capsys):
    folder = cninfo_folder(tmp_path / "reports")
    (folder / "2021-04-29__600519__2021年第一季度报告.txt").unlink()
    (moutai, said), (wuliangye, _) = screened(tmp_path, monkeypatch, capsys)
    assert moutai == "2021-04-28__600519__2020年年度报告（更正后）.txt", said
    assert wuliangye == "2021-04-23__000858__2020年年度报告摘要.txt"
