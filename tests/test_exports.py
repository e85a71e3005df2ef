"""Numbers as terminals export them, through the CLI: never a number changed silently."""

from __future__ import annotations

import json

import pytest
from test_documents import cli, write_pool

pytestmark = pytest.mark.slow


def test_an_ambiguous_comma_is_the_rows_error_and_header_units_convert(tiny_model_path, tmp_path):
    pool = write_pool(tmp_path / "p.csv", [["600519", "贵州茅台", "白酒", "25", "12,5", "4,645,500"],
                                           ["000001", "平安银行", "银行", "5", "12.5", "4 645 500"]],
                      header=("代码", "名称", "行业", "市盈率TTM", "ROE", "净利润(万)"))  # fmt: skip
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
