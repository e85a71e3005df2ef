"""Numbers as terminals export them, through the CLI: never a number changed silently."""

from __future__ import annotations

import json

import pytest
from test_documents import cli, write_pool

pytestmark = pytest.mark.slow


def test_an_ambiguous_comma_is_the_rows_error_and_header_units_convert(tiny_model_path, tmp_path):
    pool = write_pool(tmp_path / "p.csv", [["600519", "贵州茅台", "白酒", "25", "12,5", "4,645,500"],
                                           ["000001", "平安银行", "银行", "5", "12.5", "4 645 500"]],
                      header=("代码", "名称", "行业", "市盈率TTM", "ROE", "净利润(万)"))
    r = cli(["screen", str(pool), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    first, second = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    assert first["错误 error"].startswith("#QWEN! roe is ambiguous: '12,5'")  # not 125 → 低, score 100
    assert second["错误 error"] is None and second["风险等级 risk"] == "中"  # 12.5 → 中
    assert second["净利润(万)"] == 4645500  # a space-grouped number, kept a number in its column's unit


@pytest.mark.parametrize("header", ["净利润(亿港元)", "净利润(万美元)", "营业收入(斤)"])
def test_an_unknown_money_unit_is_an_error_naming_the_column(header, tiny_model_path, tmp_path):
    pool = write_pool(tmp_path / "p.csv", [["600519", "贵州茅台", "100"]], header=("代码", "名称", header))
    r = cli(["screen", str(pool), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path)
    assert r.returncode == 2 and header in r.stderr and "unknown money unit" in r.stderr, r.stderr[-500:]
    assert not (tmp_path / "out.json").exists()


# Header rows as the terminals export them (recorded header cells; see pool.FIELD_ALIASES for where each
# kind of name comes from), with one data row each; every known column must be recognised.
GALLERY = {
    "wind": (["证券代码", "证券简称", "所属申万行业名称", "市盈率PE(TTM)\n[交易日期] 2023-12-29",
              "净资产收益率ROE(平均)\n[报告期] 2023年报\n[单位] %",
              "归属母公司股东的净利润\n[报告期] 2023年报\n[单位] 元",
              "上市日期"],
             ["600519.SH", "贵州茅台", "食品饮料", "25.6", "34.19", "74734071550.99", "2001-08-27"]),
    "ifind": (["股票代码", "股票简称", "所属行业", "市盈率(PE,TTM)", "净资产收益率(%)", "归母净利润(万)", "总市值"],
              ["600519", "贵州茅台", "白酒", "25.6", "34.19", "7473407.16", "2.1万亿"]),
    "ths": (["代码", "名称", "细分行业", "市盈(TTM)", "加权净资产收益率", "基本每股收益(元)", "涨幅%"],
            ["600519", "贵州茅台", "白酒", "25.6", "34.19", "59.49", "1.2"]),
    "choice": (["代码", "名称", "所属行业", "市盈率(PE,TTM)\n[交易日期] 2023-12-29\n[单位] 倍",
                "净资产收益率ROE(加权)\n[报告期] 2023年报\n[单位] %",
                "归属母公司股东的净利润\n[报告期] 2023年报\n[单位] 万元",
                "区间涨跌幅"],
               ["600519.SH", "贵州茅台", "白酒", "25.6", "34.19", "7473407.16", "3.5"]),
    "tdx": (["代码", "名称", "细分行业", "市盈(TTM)", "净资产收益率(%)", "每股收益", "市盈(动)"],  # 动: not TTM
            ["600519", "贵州茅台", "白酒", "25.6", "34.19", "59.49", "24.1"]),
}


@pytest.mark.parametrize("terminal", sorted(GALLERY))
@pytest.mark.parametrize("form", ["csv", "semicolon", "utf16-tab", "xlsx"])
def test_export_gallery_every_known_column_recognised_the_rest_named(terminal, form, tiny_model_path, tmp_path):
    header, row = GALLERY[terminal]
    title, footer = ["沪深A股 2023-12-29"], ["数据来源：Wind"]
    path = tmp_path / f"{terminal}.{'xlsx' if form == 'xlsx' else 'txt' if form == 'utf16-tab' else 'csv'}"
    lines = [title, header, row, footer]
    if form == "xlsx":
        import openpyxl

        wb = openpyxl.Workbook()
        for line in lines:
            wb.active.append(line)
        wb.save(path)
    else:
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, delimiter={"csv": ",", "semicolon": ";", "utf16-tab": "\t"}[form])
        w.writerows(lines)
        path.write_bytes(buf.getvalue().encode("utf-16" if form == "utf16-tab" else "utf-8"))
    r = cli(["screen", str(path), "-o", str(tmp_path / "out.json")], tiny_model_path, tmp_path)
    assert r.returncode == 0, (r.stdout, r.stderr[-1500:])  # the title and the footer are no rows
    report = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    (got,) = report["rows"]
    assert got["代码 code"] == "600519.SH" and got["错误 error"] is None
    read = report["run"]["columns_read"]
    assert {"code", "name", "industry", "pe_ttm", "roe"} <= read.keys()
    unknown = report["run"]["columns_not_recognised"]
    assert [u.split(" (")[0] for u in unknown] == [header[-1]] and header[-1] in r.stderr  # named, kept
    if terminal == "tdx":  # a PE that is not PE-TTM, with the reason
        assert unknown == ["市盈(动) (a dynamic or forward PE (on a projected profit), not PE-TTM: not read)"]
    assert report["run"]["lines_skipped"] == [title[0], footer[0]]
    assert got["风险等级 risk"] == "低" and got["评分 score"] is not None  # ROE 34.19, PE 25.6 read as numbers
    if terminal == "wind":
        assert got["归属母公司股东的净利润\n[报告期] 2023年报\n[单位] 元"] == 74734071550.99  # the column as given


def test_duplicate_columns_are_an_error_naming_both(tiny_model_path, tmp_path):
    pool = write_pool(tmp_path / "p.csv", [["600519", "贵州茅台", "25", "26"]],
                      header=("代码", "名称", "PE", "市盈率TTM"))
    r = cli(["screen", str(pool), "-o", str(tmp_path / "o.json")], tiny_model_path, tmp_path)
    assert r.returncode == 2 and "'PE' and '市盈率TTM'" in r.stderr, r.stderr[-500:]


@pytest.mark.parametrize("damage", ["no-sheet", "bad-xml", "bad-zip-data"])
def test_a_damaged_xlsx_is_one_line_naming_the_file(damage, tiny_model_path, tmp_path):
    import zipfile

    import openpyxl

    good = tmp_path / "good.xlsx"
    wb = openpyxl.Workbook()
    wb.active.append(["代码", "名称"])
    wb.active.append(["600519", "贵州茅台"])
    wb.save(good)
    bad = tmp_path / "bad.xlsx"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if damage == "no-sheet" and item.filename.startswith("xl/worksheets/"):
                continue
            if damage == "bad-xml" and item.filename == "xl/worksheets/sheet1.xml":
                data = data[: len(data) // 2]
            dst.writestr(item, data)
    if damage == "bad-zip-data":  # damaged compressed bytes inside a valid zip directory
        raw = bytearray(good.read_bytes())
        at = raw.find(b"xl/worksheets/sheet1.xml") + 60
        raw[at : at + 40] = b"\x00" * 40
        bad.write_bytes(bytes(raw))
    r = cli(["screen", str(bad), "-o", str(tmp_path / "o.json")], tiny_model_path, tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr[-800:])
    assert "Traceback" not in r.stderr and "bad.xlsx" in r.stderr


def test_a_percent_sign_written_by_the_format_is_not_a_percent_format_and_long_ids_stay_text(tiny_model_path,
                                                                                          tmp_path):
    import openpyxl

    path = tmp_path / "p.xlsx"
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(["代码", "名称", "ROE", "市盈率TTM", "身份证号"])
    ws.append(["600519", "贵州茅台", 25.08, 20, "123456789012345678"])
    ws.append(["000001", "平安银行", 0.1008, 5, "223456789012345678"])
    ws["C2"].number_format = '0.00"%"'  # the value is already in percent points
    ws["C3"].number_format = "0.00%"  # a real percent format: 0.1008 shows 10.08 %
    wb.save(path)
    r = cli(["screen", str(path), "-o", str(tmp_path / "o.json")], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-800:]
    first, second = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["rows"]
    assert first["ROE"] == 25.08 and first["风险等级 risk"] == "低"  # not 2508
    assert second["ROE"] == 10.08 and second["风险等级 risk"] == "中"
    assert first["身份证号"] == "123456789012345678"  # not 1.234567890123457e+17


def test_a_report_that_cannot_be_written_leaves_no_truncated_file(tiny_model_path, tmp_path, monkeypatch):
    from xladdin.jobs import report

    pool = write_pool(tmp_path / "p.csv", [["600519", "贵州茅台"]], header=("代码", "名称"))
    out = tmp_path / "out.csv"
    out.write_text("the previous report\n", encoding="utf-8")
    real = report._write

    def full_disk(path, *args):
        real(path, *args)
        if path.suffix == ".csv":
            with open(path, "r+b") as f:
                f.truncate(8)
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "_write", full_disk)
    from conftest import tiny_settings

    from xladdin.errors import XladdinError
    from xladdin.jobs.pool_screen import screen_file

    with pytest.raises(XladdinError) as e:
        screen_file(pool, out, tiny_settings(tmp_path, model=str(tiny_model_path)), progress=False)
    assert out.read_text(encoding="utf-8") == "the previous report\n"  # not replaced by a truncated one
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp.csv")]
    rescued = json.loads((tmp_path / "out.rescued.json").read_text(encoding="utf-8"))
    assert rescued["rows"][0]["代码 code"] == "600519.SH" and "rescued.json" in str(e.value)


@pytest.mark.parametrize("value, words", [(True, "pe_limit: Value error, must be a number, not True"),
                                          (1e400, "pe_limit: Input should be a finite number"),
                                          ("abc", "pe_limit: Input should be a valid number")])
def test_a_bad_rules_value_names_the_key_and_the_reason(value, words, tmp_path):
    from xladdin.core.batcher import Batcher
    from xladdin.core.cache import Cache
    from xladdin.excel import udfs
    from xladdin.sheet.functions import CellRuntime
    from xladdin.testing import ScriptedEngine, screen_answer

    udfs.set_runtime(CellRuntime(batcher=Batcher(ScriptedEngine(lambda _: screen_answer()), Cache(tmp_path / "c"))))
    try:
        row = [600519.0, "贵州茅台", "白酒", 25.0, 30.0, 59.0, "营收1505亿元"]
        out = udfs.QWEN_SCREEN([row], False, [["pe_limit", value], [None, None]])
    finally:
        udfs.set_runtime(None)
    assert out[0][0] == f"#QWEN! rules {words}" or out[0][0].startswith(f"#QWEN! rules {words}"), out[0][0]
    assert "pydantic.dev" not in out[0][0]


def test_cache_clear_on_a_damaged_cache_removes_only_the_caches_files(tmp_path):
    from kit import run_cli

    from xladdin.core.cache import Cache

    cache = tmp_path / "cache"
    made = Cache(cache)  # a real cache with large entries (value files in its two-hex-digit folders)
    for i in range(3):
        made.set(f"k{i}", {"answer": "x" * 100_000})
    made.set_meta("model", "m")
    made.close()
    values = sorted(p for p in cache.rglob("*.val"))
    assert values and (cache / "meta" / "cache.db").is_file()
    (cache / "cache.db").write_bytes(b"not a database")  # damaged
    mine = {"mywork.txt": "my notes", "sub/notes.md": "# notes", "thesis.docx": "PK draft",
            f"{values[0].parent.relative_to(cache).as_posix()}/keep.txt": "inside a value folder",
            "meta/readme.txt": "beside the side store", "cache.db.bak": "a copy of mine"}
    for name, text in mine.items():
        (cache / name).parent.mkdir(parents=True, exist_ok=True)
        (cache / name).write_text(text, encoding="utf-8")
    r = run_cli("cache", "clear", "--cache-dir", cache)
    assert r.returncode == 0 and "made a new one: a working, empty cache" in r.stdout, r
    for name, text in mine.items():  # every file of the user's is there, unchanged
        assert (cache / name).read_text(encoding="utf-8") == text, name
        assert name in r.stdout  # and named as left
    assert not any(p.exists() for p in values)  # the cache's own value files are gone
    assert "cache.db" in r.stdout.split("left as they were")[0]  # said as removed
    stats = run_cli("cache", "stats", "--cache-dir", cache)
    assert json.loads(stats.stdout)["enabled"] is True and json.loads(stats.stdout)["entries"] == 0


@pytest.mark.parametrize("kind", ["binary", "html", "tab-text"])
def test_xls_files_of_every_kind_terminals_save(kind, tiny_model_path, tmp_path):
    path = tmp_path / "pool.xls"
    header, row = ["代码", "名称", "净资产收益率(%)", "市盈率(TTM)"], ["600519", "贵州茅台", 34.19, 25.6]
    if kind == "binary":
        import xlwt

        book = xlwt.Workbook()
        sheet = book.add_sheet("Sheet1")
        for c, v in enumerate(header):
            sheet.write(0, c, v)
        percent = xlwt.easyxf(num_format_str="0.00%")
        sheet.write(1, 0, row[0])
        sheet.write(1, 1, row[1])
        sheet.write(1, 2, 0.3419, percent)  # shown 34.19 %
        sheet.write(1, 3, row[3])
        book.save(str(path))
    elif kind == "html":
        cells = "".join(f"<tr>{''.join(f'<td>{v}</td>' for v in r)}</tr>" for r in (header, row))
        path.write_text(f"<html><head><meta charset='utf-8'></head><body><table>{cells}</table></body></html>",
                        encoding="utf-8")
    else:
        path.write_text("\n".join("\t".join(map(str, r)) for r in (header, row)), encoding="gb18030")
    r = cli(["screen", str(path), "-o", str(tmp_path / "o.json")], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-800:]
    (got,) = json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["rows"]
    assert got["代码 code"] == "600519.SH" and got["风险等级 risk"] == "低" and got["评分 score"] is not None
    assert got["净资产收益率(%)"] == pytest.approx(34.19)
