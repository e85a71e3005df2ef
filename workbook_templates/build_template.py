"""Build workbook_templates/stock_screen.xlsx from sample_pool.csv (run: python workbook_templates/build_template.py).

Sheets: Pool (the sample companies, one QWEN_SCREEN formula per row), Rules
(thresholds read by the formulas), Summary (counts by risk level, a chart),
How-to (中文 / English), xlwings.conf (the UDF module).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from openpyxl import Workbook
from openpyxl.chart import BarChart, Reference
from openpyxl.styles import Alignment, Font, PatternFill
from openpyxl.utils import get_column_letter

from xladdin.excel.macros import POOL_COLUMNS, RULES_REF, VERDICT_COL, verdict_formula
from xladdin.reading.pool import SAMPLE_POOL, match_header
from xladdin.sheet import functions
from xladdin.tasks.rules import RiskLevel

HERE = Path(__file__).parent
MAX_ROWS = 500

HOWTO = [
    ("xladdin 股票池筛选模板", ""),
    ("", ""),
    ("中文", ""),
    ("1. 安装", "pip install xladdin（或在项目目录 pip install -e .），然后 xlwings addin install"),
    (
        "2. 设置",
        "Excel 功能区 xlwings 选项卡：UDF Modules 填 xladdin.excel.udfs（本工作簿的 xlwings.conf 表已写好），点 Import Functions",
    ),
    ("3. 模型", "默认使用本机嵌入式 CPU 引擎；有 GPU 服务器时设置环境变量 XLADDIN_ENGINE_URL=http://服务器:8000/v1"),
    (
        "4. 使用",
        "Pool 表每行 L 列的 =QWEN_SCREEN(A2:J2,FALSE,Rules!$A$2:$B$20) 向右溢出：风险等级、评分、理由、标记、数字",
    ),
    (
        "5. 刷新",
        "点击 xlwings 选项卡的 Run main（stock_screen.py 放在工作簿旁），整张表一次批量计算后自动重算；之后每个公式都直接读缓存",
    ),
    ("", '自己加按钮：另存为 .xlsm，按钮宏写 RunPython "import xladdin.excel.macros as m; m.refresh()"'),
    ("6. 规则", "在 Rules 表修改阈值（ROE 区间、PE-TTM 上限、评分权重），公式随之重算，无需再问模型"),
    (
        "7. 其他函数",
        '=QWEN(问题, 资料区域)  =QWEN_EXTRACT(文本, "净利润", "亿元")  =QWEN_CLASSIFY(文本, 类别区域)  =QWEN_STATUS()',
    ),
    ("", "计算中的单元格显示 #QWEN… 计算中 pending，结果返回后自动刷新；错误显示 #QWEN! 加原因"),
    ("", ""),
    ("English", ""),
    ("1. Install", "pip install xladdin (or pip install -e . in the project folder), then: xlwings addin install"),
    (
        "2. Configure",
        "xlwings ribbon tab: UDF Modules = xladdin.excel.udfs (already in this workbook's xlwings.conf sheet), click Import Functions",
    ),
    (
        "3. Model",
        "The embedded CPU engine is the default; for a GPU server set XLADDIN_ENGINE_URL=http://server:8000/v1",
    ),
    (
        "4. Use",
        "Column L of Pool holds =QWEN_SCREEN(A2:J2,FALSE,Rules!$A$2:$B$20) per row; it spills risk level, score, reason, flags, figures",
    ),
    (
        "5. Refresh",
        "xlwings ribbon: Run main (keep stock_screen.py next to the workbook) screens the whole table as one batch, then recalculates; every formula is then a cache hit",
    ),
    (
        "",
        'A button of your own: save as .xlsm, macro RunPython "import xladdin.excel.macros as m; m.refresh()"',
    ),
    (
        "6. Rules",
        "Edit thresholds on the Rules sheet (ROE bands, PE-TTM limit, score weights); formulas recalculate without asking the model again",
    ),
    (
        "7. More",
        '=QWEN(prompt, context)  =QWEN_EXTRACT(text, "净利润", "亿元")  =QWEN_CLASSIFY(text, labels)  =QWEN_STATUS()',
    ),
    (
        "",
        "Pending cells show #QWEN… 计算中 pending and fill in when their batch returns; errors show #QWEN! and the reason",
    ),
]


def sample_rows() -> list[list[object]]:
    """The sample pool in the Pool sheet's column order, numbers as numbers."""
    with SAMPLE_POOL.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        fields = [match_header(h)[0] for h in header]
        wanted = [match_header(h)[0] for h in POOL_COLUMNS]
        out = []
        for raw in reader:
            rec = dict(zip(fields, raw, strict=True))
            row: list[object] = []
            for name in wanted:
                value = rec.get(name)
                if name in ("code", "name", "industry", "report_text"):
                    row.append(value)
                else:
                    row.append(float(value) if value not in (None, "") else None)
            out.append(row)
    return out


def build(path: Path) -> Path:
    wb = Workbook()
    pool = wb.active
    pool.title = "Pool"
    spill = functions.spill_header()
    verdict_idx = ord(VERDICT_COL) - ord("A") + 1
    header = list(POOL_COLUMNS) + [""] * (verdict_idx - 1 - len(POOL_COLUMNS)) + spill
    pool.append(header)
    for r, values in enumerate(sample_rows(), start=2):
        pool.append(values)
        pool.cell(row=r, column=verdict_idx, value=verdict_formula(r))
        pool.cell(row=r, column=1).number_format = "@"
    for cell in pool[1]:
        cell.font = Font(bold=True)
    for c in range(verdict_idx, verdict_idx + len(spill)):
        pool.cell(row=1, column=c).fill = PatternFill("solid", start_color="DDEBF7")
    pool.freeze_panes = "C2"
    widths = {"A": 11, "B": 10, "C": 10, "G": 50}
    for col, width in widths.items():
        pool.column_dimensions[col].width = width

    rules = wb.create_sheet("Rules")
    rules.append(["key", "value", "说明 description"])
    for row in functions.rules_rows():
        rules.append(row)
    rules["E1"] = "QWEN_SCREEN 读取 " + RULES_REF + "；修改数值后公式重算，不再询问模型 / formulas read this range"
    for cell in rules[1]:
        cell.font = Font(bold=True)
    rules.column_dimensions["A"].width = 22
    rules.column_dimensions["C"].width = 48

    summary = wb.create_sheet("Summary")
    risk_col = get_column_letter(verdict_idx + functions.SPILL_FIELDS.index("risk_level"))
    score_col = get_column_letter(verdict_idx + functions.SPILL_FIELDS.index("score"))
    risk_range = f"Pool!${risk_col}$2:${risk_col}${MAX_ROWS + 1}"
    summary.append(["风险等级 risk", "数量 count"])
    for i, level in enumerate(RiskLevel, start=2):
        summary.append([level.value, f"=COUNTIF({risk_range},A{i})"])
    summary.append(["合计 total", f"=SUM(B2:B{len(RiskLevel) + 1})"])
    summary.append(["平均评分 mean score", f'=IFERROR(AVERAGE(Pool!${score_col}$2:${score_col}${MAX_ROWS + 1}),"")'])
    summary.append(["待计算 pending", f'=COUNTIF({risk_range},"")-COUNTBLANK(Pool!$A$2:$A${MAX_ROWS + 1})'])
    for cell in summary[1]:
        cell.font = Font(bold=True)
    summary.column_dimensions["A"].width = 22
    chart = BarChart()
    chart.title = "风险分布 risk levels"
    chart.add_data(Reference(summary, min_col=2, min_row=1, max_row=len(RiskLevel) + 1), titles_from_data=True)
    chart.set_categories(Reference(summary, min_col=1, min_row=2, max_row=len(RiskLevel) + 1))
    summary.add_chart(chart, "D2")

    howto = wb.create_sheet("How-to")
    for row in HOWTO:
        howto.append(list(row))
    howto["A1"].font = Font(bold=True, size=14)
    for cell in ("A3", "A14"):
        howto[cell].font = Font(bold=True)
    howto.column_dimensions["A"].width = 16
    howto.column_dimensions["B"].width = 120
    for row in howto.iter_rows():
        for cell in row:
            if cell.data_type == "f":  # a line of help that starts with "=" is text, not a formula
                cell.data_type = "s"
            cell.alignment = Alignment(wrap_text=True, vertical="top")

    conf = wb.create_sheet("xlwings.conf")
    conf.append(["UDF Modules", "xladdin.excel.udfs"])
    conf.append(["Use UDF Server", "True"])
    wb.save(path)
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "stock_screen.xlsx"
    print(build(out))
