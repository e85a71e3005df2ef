"""The template workbook: built reproducibly, every formula uses functions that exist,
the Rules sheet round-trips, and LibreOffice keeps every formula."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import openpyxl
import pytest

from xladdin.excel import udfs
from xladdin.excel.macros import RULES_REF, verdict_formula
from xladdin.sheet import functions
from xladdin.tasks.rules import DEFAULT_RULES, Rules

ROOT = Path(__file__).parent.parent
TEMPLATE = ROOT / "workbook_templates" / "stock_screen.xlsx"
BUILTINS = {"COUNTIF", "SUM", "AVERAGE", "IFERROR", "COUNTBLANK", "FALSE", "TRUE"}
OURS = {name for name in dir(udfs) if name.startswith("QWEN")}
FUNC = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\(")


def formulas(path):
    wb = openpyxl.load_workbook(path)
    return {(ws.title, c.coordinate): c.value for ws in wb for row in ws.iter_rows() for c in row
            if isinstance(c.value, str) and c.value.startswith("=")}


def contents(path):
    wb = openpyxl.load_workbook(path)
    return {ws.title: [[c.value for c in row] for row in ws.iter_rows()] for ws in wb}


def test_committed_template_matches_its_build_script(tmp_path):
    out = tmp_path / "t.xlsx"
    subprocess.run([sys.executable, str(ROOT / "workbook_templates" / "build_template.py"), str(out)], check=True,
                   cwd=ROOT)
    assert contents(out) == contents(TEMPLATE)


def test_sheets_and_formulas():
    wb = openpyxl.load_workbook(TEMPLATE)
    assert wb.sheetnames == ["Pool", "Rules", "Summary", "How-to", "xlwings.conf"]
    conf = {r[0]: r[1] for r in wb["xlwings.conf"].iter_rows(values_only=True)}
    assert conf["UDF Modules"] == "xladdin.excel.udfs"
    pool = wb["Pool"]
    n = sum(1 for r in pool.iter_rows(min_row=2, values_only=True) if r[0])
    assert n >= 18
    for r in range(2, n + 2):
        assert pool[f"L{r}"].value == verdict_formula(r) == f"=QWEN_SCREEN(A{r}:J{r},FALSE,{RULES_REF})"
    assert [c.value for c in pool[1]][11:] == functions.spill_header()
    assert wb["Summary"]._charts
    # help text that shows a formula is text: no spreadsheet computes it (Calc read it as one before)
    assert not [c.coordinate for row in wb["How-to"].iter_rows() for c in row if c.data_type == "f"]


def test_formulas_call_only_functions_that_exist():
    found = set()
    for (_, _), f in formulas(TEMPLATE).items():
        found |= {name.upper() for name in FUNC.findall(f)}
    assert found and found <= BUILTINS | OURS, found - BUILTINS - OURS
    assert {"QWEN_SCREEN", "COUNTIF"} <= found
    assert OURS == {"QWEN", "QWEN_SCREEN", "QWEN_EXTRACT", "QWEN_CLASSIFY", "QWEN_HIGHLIGHTS", "QWEN_STATUS"}


def test_rules_sheet_round_trips():
    ws = openpyxl.load_workbook(TEMPLATE)["Rules"]
    top, bottom = RULES_REF.split("!")[1].replace("$", "").split(":")
    values = [[c.value for c in row] for row in ws[top:bottom]]
    n = len(Rules.model_fields)
    assert len(values) >= n and [v[0] for v in values[:n]] == list(Rules.model_fields)
    assert all(v[0] is None for v in values[n:])  # room for more rules, read as blanks
    assert functions.rules_from_range(values) == DEFAULT_RULES
    values[2][1] = 30  # pe_limit
    assert functions.rules_from_range(values).pe_limit == 30


@pytest.mark.skipif(shutil.which("soffice") is None, reason="LibreOffice (libreoffice-calc-nogui) not installed")
def test_libreoffice_keeps_every_formula(tmp_path):
    subprocess.run(["soffice", "--headless", "--calc", "--convert-to", "xlsx", "--outdir", str(tmp_path),
                    str(TEMPLATE)], check=True, capture_output=True, timeout=180)

    def norm(f):  # LibreOffice lower-cases unknown names and writes FALSE as FALSE()
        return f.upper().replace("FALSE()", "FALSE").replace("TRUE()", "TRUE")

    before = {k: norm(v) for k, v in formulas(TEMPLATE).items()}
    after = {k: norm(v) for k, v in formulas(tmp_path / TEMPLATE.name).items()}
    assert after == before
