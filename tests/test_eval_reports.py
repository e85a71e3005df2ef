"""``xladdin eval GOLD.jsonl``: a gold file of report files, scored per field as right / wrong / missing."""

from __future__ import annotations

import json

from test_documents import cli

from xladdin.testing import write_report_pdf


def test_eval_of_a_report_gold_counts_right_wrong_and_missing_per_field(tiny_model_path, tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    write_report_pdf(reports / "600001_2023.pdf")  # 营业收入 52,310.50 万元, 净利润 3,120.40 万元 (上年 2,050.20)
    gold = {"file": "600001_2023.pdf", "code": "600001", "name": "样本", "revenue": 523105000.0,
            "net_profit": 31204000.0, "net_profit_prev": 20502000.0, "eps": 0.26,  # the report prints 0.25
            "roe": 8.1, "gross_margin": 30.0}  # no income statement in the file: missing
    (tmp_path / "gold.jsonl").write_text(json.dumps(gold, ensure_ascii=False) + "\n", encoding="utf-8")
    r = cli(["eval", str(tmp_path / "gold.jsonl"), "--reports", str(reports), "-o", str(tmp_path / "e.json")],
            tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    fields = json.loads((tmp_path / "e.json").read_text(encoding="utf-8"))["fields"]
    assert fields["revenue"] == {"right": 1, "wrong": 0, "missing": 0}
    assert fields["net_profit"]["right"] == 1 and fields["net_profit_prev"]["right"] == 1
    assert fields["roe"]["right"] == 1
    assert fields["eps"] == {"right": 0, "wrong": 1, "missing": 0}
    assert fields["gross_margin"] == {"right": 0, "wrong": 0, "missing": 1}
    assert fields["ocf"] == {"right": 0, "wrong": 0, "missing": 0}  # no gold value: not scored
    assert "eps wrong (gold 0.26, read 0.25)" in r.stdout and "gross_margin missing" in r.stdout
    assert "key figures (8)" in r.stdout


def test_a_bad_gold_line_names_its_file_line_and_field(tiny_model_path, tmp_path):
    (tmp_path / "gold.jsonl").write_text('{"file": "a.pdf", "code": "600001", "name": "x", "revenue": "多"}\n',
                                         encoding="utf-8")
    r = cli(["eval", str(tmp_path / "gold.jsonl")], tiny_model_path, tmp_path)
    assert r.returncode != 0
    assert "gold.jsonl line 1: 'revenue' is '多', expected a number or null" in r.stderr
