"""The nightly run: what changed since last night (``screen --compare``, ``xladdin diff``), through the CLI
with the tiny model. Levels and scores come from the rules, so the changes are worked out here by hand."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
from test_documents import cli

pytestmark = pytest.mark.slow

HEADER = ("代码", "名称", "行业", "市盈率TTM", "ROE")


def diff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xladdin.cli.main", "diff", *args], capture_output=True, text=True,
                          timeout=120)


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
