"""Only the pages that matter (issue 43 item 3): an annual report's chapters its 目录 lists and no figure,
date or excerpt comes from (重要事项, 公司治理 …) are not read, each page keeping its number; a 目录
whose page numbers are wrong, or none, reads everything. Through ``xladdin screen --reports`` on PDFs
made here, and the reading itself."""

from __future__ import annotations

import json

from test_documents import PAGE_1, PAGE_2, cli, make_pdf

from xladdin.reading.documents import read_document
from xladdin.reading.tables import PAGE_BREAK

CONTENTS = ["2023年年度报告", "目录", "第一节 释义 ........ 3", "第二节 公司简介和主要财务指标 ........ 4",
            "第三节 管理层讨论与分析 ........ 6", "第四节 重要事项 ........ 7", "第五节 公司治理 ........ 8",
            "第六节 财务报告 ........ 10"]


def report(contents: list[str]) -> list[list[str]]:
    """Ten pages: cover and 目录, 释义, the key-figure table (pages 4-5), the management discussion, two
    chapters not read (重要事项 on page 7, 公司治理 on pages 8-9, each with a sentence naming a figure), the
    financial report (page 10)."""
    return [
        contents[:1],
        contents[1:],
        ["第一节 释义", "本公司 指 测试股份有限公司"],
        PAGE_1,
        PAGE_2,
        ["第三节 管理层讨论与分析", "报告期内，公司实现营业收入5.23亿元。"],
        ["第四节 重要事项", "重大合同：公司与客户签订合同金额9.99亿元。"],
        ["第五节 公司治理", "董事会共召开会议8次。"],
        ["公司治理续", "监事会共召开会议5次。"],
        ["第六节 财务报告", "审计报告", "审计意见 我们审计了测试股份有限公司财务报表。"],
    ]


def test_the_chapters_not_read_are_left_out_each_page_keeping_its_number(tmp_path):
    make_pdf(tmp_path / "600001_2023.pdf", report(CONTENTS))
    pages = read_document(tmp_path / "600001_2023.pdf").split(PAGE_BREAK)
    assert len(pages) == 10
    assert "重要事项" in pages[6]  # the page a chapter not read opens on is read (the chapter before may end there)
    assert pages[7] == pages[8] == ""  # 公司治理: not read
    assert "审计意见" in pages[9] and "营业收入 52,310.50" in pages[3]


def test_a_contents_page_with_wrong_numbers_or_none_reads_every_page(tmp_path):
    wrong = [line.replace("........ 10", "........ 12") for line in CONTENTS]  # 财务报告 not where it says
    make_pdf(tmp_path / "wrong.pdf", report(wrong))
    assert all(read_document(tmp_path / "wrong.pdf").split(PAGE_BREAK))
    make_pdf(tmp_path / "none.pdf", report(["2023年年度报告", "致股东"]))
    assert all(read_document(tmp_path / "none.pdf").split(PAGE_BREAK))


def test_through_the_cli_the_key_figures_keep_their_pages(tiny_model_path, tmp_path):
    (tmp_path / "reports").mkdir()
    make_pdf(tmp_path / "reports" / "600001_2023.pdf", report(CONTENTS))
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,行业\n600001,测试股份,设备\n", encoding="utf-8")
    r = cli(["screen", str(pool), "--reports", str(tmp_path / "reports"), "-o", str(tmp_path / "out.json")],
            tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    assert row["营收(亿元) revenue"] == 5.2310500 and row["净利润(亿元) net profit"] == -0.312040
    assert "(第4页)" in row["出处 evidence"] and "(第5页)" in row["出处 evidence"]  # EPS and ROE on page 5


def test_a_chapter_read_stops_at_its_assets_section_and_the_statements_at_the_cash_flow(tiny_model_path, tmp_path):
    """The management discussion is read up to its 资产及负债状况 (what follows it, 投资状况, is not read: the
    next page read is the financial report's); the financial report up to the 合并现金流量表's operating line
    (the statement of changes in equity and the notes after it are not); 释义 is not read either."""
    contents = ["2023年年度报告", "目录", "第一节 释义 ........ 3", "第二节 公司简介和主要财务指标 ........ 5",
                "第三节 管理层讨论与分析 ........ 7", "第四节 重要事项 ........ 10", "第五节 财务报告 ........ 11"]
    pages = [
        contents[:1], contents[1:],
        ["第一节 释义", "本公司 指 测试股份有限公司"], ["释义续", "报告期 指 2023年"],
        PAGE_1, PAGE_2,
        ["第三节 管理层讨论与分析", "报告期内，公司实现营业收入5.23亿元。"],
        ["公司资产负债率为40%。", "(三) 资产、负债情况分析", "货币资金1.11亿元。"],
        ["(四) 投资状况分析", "公司对外投资金额7.77亿元。"],
        ["第四节 重要事项", "重大合同：公司与客户签订合同金额9.99亿元。"],
        ["第五节 财务报告", "审计报告", "审计意见 我们审计了测试股份有限公司财务报表。"],
        ["合并利润表", "单位：元", "营业收入 523,105,000.00 480,000,000.00", "营业成本 300,000,000.00 280,000,000.00",
         "销售费用 10,000,000.00 9,000,000.00", "利润总额 -20,000,000.00 5,000,000.00"],
        ["合并现金流量表", "单位：元", "经营活动产生的现金流量净额 12,345,678.00 9,876,543.00"],
        ["合并所有者权益变动表", "本年年初余额 1,000,000,000.00"],
        ["财务报表附注", "一、公司基本情况"],
    ]
    make_pdf(tmp_path / "600002_2023.pdf", pages)
    read = read_document(tmp_path / "600002_2023.pdf").split(PAGE_BREAK)
    assert read[2] and not read[3]  # 释义: the page it opens on is read (the 目录's chapter may end there)
    assert "资产、负债情况分析" in read[7] and read[8] == read[9] == ""
    assert "审计意见" in read[10] and "营业收入" in read[11] and "经营活动产生的现金流量净额" in read[12]
    assert len(read) == 13  # the statement of changes in equity and the notes: not read
    # through the CLI: the key figures as the table prints them, each with its page
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,行业\n600002,测试股份,设备\n", encoding="utf-8")
    r = cli(["screen", str(pool), "--reports", str(tmp_path), "-o", str(tmp_path / "out.json")], tiny_model_path,
            tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    (row,) = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    assert row["营收(亿元) revenue"] == 5.2310500 and "(第5页)" in row["出处 evidence"]


def test_the_older_template_s_contents_page_leaves_out_its_chapters_too(tmp_path):
    """The 目录 of the older template (一、重要提示……1, no 第N节): its chapters not read (股本变动, 重要事项) are left
    out as a 第N节 one's are; a numbered list that is no 目录 (no leaders) plans nothing."""
    contents = ["2011年年度报告", "目录", "一、重要提示……………………3", "二、主要财务数据和指标……………………4",
                "三、股本变动及股东情况……………………6", "四、董事会报告……………………8", "五、重要事项……………………9",
                "六、财务会计报告……………………11"]
    pages = [
        contents[:1], contents[1:],
        ["一、重要提示", "本公司董事会保证本报告所载资料不存在任何虚假记载。"],
        PAGE_1, PAGE_2,
        ["三、股本变动及股东情况", "报告期末股东总数12,345户。"],
        ["股东情况续", "前十名股东持股情况。"],
        ["四、董事会报告", "报告期内，公司实现营业收入5.23亿元。"],
        ["五、重要事项", "重大合同：公司与客户签订合同金额9.99亿元。"],
        ["重要事项续", "担保情况。"],
        ["六、财务会计报告", "审计报告", "审计意见 我们审计了测试股份有限公司财务报表。"],
    ]
    make_pdf(tmp_path / "600003_2011.pdf", pages)
    read = read_document(tmp_path / "600003_2011.pdf").split(PAGE_BREAK)
    assert len(read) == 11 and "营业收入 52,310.50" in read[3] and "董事会报告" in read[7]
    assert read[6] == "" and read[9] == ""  # 股本变动 and 重要事项: not read past the page each opens on
    assert "审计意见" in read[10]
    listed = [line.replace("……………………", " ") for line in contents]  # no leaders: a list, not a 目录
    make_pdf(tmp_path / "600004_2011.pdf", [listed[:1], listed[1:], *pages[2:]])
    assert all(read_document(tmp_path / "600004_2011.pdf").split(PAGE_BREAK))


def test_a_contents_page_whose_numbers_stand_on_the_wrong_lines_still_finds_the_chapter(tmp_path):
    """A 目录 whose text gives each number a line late (the numbers set apart from their titles: 财务报告's 10
    printed beside 备查文件目录): the financial report is found at the number of a line near its own, checked
    by its heading, and the chapters before it are not read."""
    contents = ["2023年年度报告", "目录", "第一节 释义 ........ 1", "第二节 公司简介和主要财务指标 ........ 3",
                "第三节 管理层讨论与分析 ........ 4", "第四节 重要事项 ........ 6", "第五节 公司治理 ........ 7",
                "第六节 财务报告 ........ 8", "第七节 备查文件目录 ........ 10"]
    make_pdf(tmp_path / "600005_2023.pdf", report(contents))
    read = read_document(tmp_path / "600005_2023.pdf").split(PAGE_BREAK)
    assert len(read) == 10 and "营业收入 52,310.50" in read[3]
    assert read[7] == read[8] == ""  # 公司治理: not read, although 财务报告's own number (8) is wrong
    assert "审计意见" in read[9]


def _financial_report(income_titles: int) -> list[list[str]]:
    """A financial report: the auditor's report (two pages, its date on the second), the balance sheets
    (three pages: no figure is read from them), the 合并利润表 over two pages (its title on the first, or on
    both as a bank prints it), the 合并现金流量表."""
    rows = ["一、营业总收入 523,105,000.00 480,000,000.00", "其中：营业收入 523,105,000.00 480,000,000.00",
            "营业成本 300,000,000.00 280,000,000.00", "销售费用 10,000,000.00 9,000,000.00"]
    return [
        ["2023年年度报告"],
        ["审计报告", "一、审计意见", "我们审计了测试股份有限公司财务报表，包括", "合并资产负债表，合并利润表",
         "以及相关财务报表附注。"],  # a line of prose that begins with a statement's name: no title
        ["中国注册会计师：张三", "二〇二四年三月二十八日"],  # the auditor's report's date: read
        ["二、财务报表", "1、合并资产负债表", "货币资金 1,000,000.00 900,000.00"],
        ["应收账款 2,000,000.00 1,900,000.00"], ["2、母公司资产负债表", "货币资金 500,000.00 400,000.00"],
        ["3、合并利润表", "单位：元", *rows],
        [*(["3、合并利润表", "单位：元"] if income_titles == 2 else []), "利润总额 -20,000,000.00 5,000,000.00",
         "净利润 -20,000,000.00 5,000,000.00", "所得税费用 1,000.00 2,000.00"],
        ["5、合并现金流量表", "单位：元", "经营活动产生的现金流量净额 12,345,678.00 9,876,543.00"],
    ]


def test_the_balance_sheets_are_passed_and_the_income_statement_read_from_its_first_page(tmp_path):
    """The balance sheets' pages are not read (the 合并利润表 is found a few pages on, by its title line);
    where the income statement prints its title on each page, it is still read from its first."""
    for titles in (1, 2):
        make_pdf(tmp_path / f"t{titles}.pdf", _financial_report(titles))
        read = read_document(tmp_path / f"t{titles}.pdf").split(PAGE_BREAK)
        assert len(read) == 9 and "二〇二四年三月二十八日" in read[2] and "合并资产负债表" in read[3]
        assert read[4] == read[5] == ""  # the balance sheets, each page keeping its number
        assert "其中：营业收入 523,105,000.00" in read[6] and "利润总额" in read[7]  # (the second page looked at
        assert "经营活动产生的现金流量净额" in read[8]  # first: its title sends the look back a page)
