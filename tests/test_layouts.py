"""Key-figure table layouts, each a generated annual-report PDF scored by ``xladdin eval`` through the CLI:
every figure right or, where code cannot place it exactly, missing with the reason — never wrong."""

from __future__ import annotations

import json

import pytest
from test_documents import cli, make_pdf

COVER = ["2023年年度报告", "第二节 公司简介和主要财务指标"]
STATEMENT = ["第十节 财务报告", "3、合并利润表", "单位：元", "项目 附注 2023 年度 2022 年度",
             "一、营业总收入 1,000,000.00 800,000.00", "其中：营业收入 30 1,000,000.00 800,000.00",
             "二、营业总成本 900,000.00 700,000.00", "其中：营业成本 30 600,000.00 520,000.00"]
PARENT = ["4、母公司利润表", "单位：元", "项目 2023 年度 2022 年度", "一、营业收入 400,000.00 300,000.00",
          "减：营业成本 100,000.00 90,000.00"]
GM = {"gross_margin": 40.0, "gross_margin_prev": 35.0}  # (1,000,000 - 600,000) / 1,000,000; 280/800

LAYOUTS: dict[str, tuple[list[list[str]], dict]] = {
    # the unit in each row's label; labels wrapped over two or three lines, the numbers on the middle one
    "row_unit_wrapped": ([COVER + [
        "六、主要会计数据和财务指标", "公司是否需追溯调整或重述以前年度会计数据", "□ 是 √ 否",
        "2023 年 2022 年 本年比上年增减 2021 年",
        "营业收入（元） 2,941,412,770.30 2,718,608,796.51 8.20% 2,308,922,170.29",
        "归属于上市公司股东的净利润", "（元） 770,782,185.09 605,003,820.78 27.40% 342,217,155.60",
        "归属于上市公司股东的扣",
        "除非经常性损益的净利 751,209,860.23 604,944,470.09 24.18% 301,310,316.13", "润（元）",
        "经营活动产生的现金流量净额", "（元） 612,399,095.31 791,449,237.66 -22.62% 118,141,514.53",
        "基本每股收益（元/股） 0.48 0.38 26.32% 0.22",
        "加权平均净资产收益率 14.07% 11.35% 增加2.72个 6.90%", "百分点",  # the change wrapped to the next line
        "七、境内外会计准则下会计数据差异"],
        STATEMENT, PARENT],
        {"revenue": 2941412770.30, "net_profit": 770782185.09, "net_profit_prev": 605003820.78,
         "net_profit_ex": 751209860.23, "ocf": 612399095.31, "net_profit_change_pct": 27.40, "eps": 0.48,
         "roe": 14.07, **GM}),
    # a change cell cut mid-word by a line break, the last column's figure after its end (减少2.23个百 / 分点 6.31)
    "change_cut_mid_word": ([COVER + [
        "七、近三年主要会计数据和财务指标", "(一) 主要会计数据", "单位：元 币种：人民币",
        "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
        "营业收入 20,000,000.00 16,000,000.00 25.00 15,000,000.00",
        "归属于上市公司股东的净利润 3,000,000.00 2,500,000.00 20.00 2,000,000.00",
        "(二) 主要财务指标", "主要财务指标 2023年 2022年", "本期比上年同", "期增减(%) 2021年",
        "基本每股收益（元／股） 0.31 0.32 -3.75 0.14",
        "加权平均净资产收益率（%） 11.64 13.87 减少2.23个百", "分点 6.31",
        "扣除非经常性损益后的加权平均", "净资产收益率（%）", "12.14 7.00 增加5.14个百", "分点 7.55",
        "八、境内外会计准则下会计数据差异"], STATEMENT],
        {"revenue": 20000000.0, "net_profit": 3000000.0, "net_profit_prev": 2500000.0, "net_profit_change_pct": 20.0,
         "eps": 0.31, "roe": 11.64, **GM}),
    # a 单位 line in 万元, negatives in parentheses, the table split over two pages, a spaced change in words
    "unit_line_two_pages": ([COVER + [
        "七、近三年主要会计数据和财务指标", "(一) 主要会计数据", "单位：万元 币种：人民币",
        "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
        "营业收入 52,310.50 48,002.10 8.98 40,100.00",
        "归属于上市公司股东", "的净利润 (3,120.40) (1,050.20) 不适用 2,300.00",
        "归属于上市公司股东的扣除非经常性损益的净利润 (3,300.00) (1,100.00) - 2,100.00"],
        ["2023年年度报告", "8", "经营活动产生的现金", "流量净额 1,200.00 900.00 33.33 800.00",
         "(二) 主要财务指标", "主要财务指标 2023年 2022年 本期比上年同期增减(%) 2021年",
         "基本每股收益（元／股） -0.25 -0.08 不适用 0.19",
         "加权平均净资产收益率（%） -4.10 -1.32 减少 2.78 个百分点 2.95", "八、境内外会计准则下会计数据差异"],
        STATEMENT],
        {"revenue": 523105000.0, "net_profit": -31204000.0, "net_profit_prev": -10502000.0,
         "net_profit_ex": -33000000.0, "ocf": 12000000.0, "eps": -0.25, "roe": -4.10, **GM}),
    # a bank: the unit in a group header, 归属于本行股东, 上年同期为负 and – as changes, an infographic page
    # before the table repeating its figures, no 营业成本 (no gross margin)
    "bank_group_header": ([["第二章 会计数据和财务指标摘要", "主要会计数据和财务指标一览",
                            "营业收入 归属于本行股东的净利润",
                            "2021年 2022年 2023年", "168,804", "184,951 180,441", "单位 ：人民币百万元"],
                           ["22 示例银行股份有限公司", "第二章 会计数据和财务指标摘要", "一、主要会计数据和财务指标",
                            "2023年 2022年", "本报告期比", "上年同期 2021年", "经营业绩（人民币百万元） 增减(%)",
                            "营业收入 168,804 184,951 -8.73 180,441", " 利息净收入 125,775 135,224 -6.99 122,034",
                            "归属于本行股东的净利润 34,381 34,309 0.21 53,819", "归属于本行股东的扣除非经常性",
                            " 损益的净利润 34,495 34,455 0.12 53,720",
                            "经营活动产生的现金流量净额 155,417 -82,402 上年同期为负 -84,927", "每股计（人民币元）",
                            "基本每股收益 0.71 0.71 – 1.22", "盈利能力指标(%) 变动百分点",
                            "加权平均净资产收益率 6.59 6.81 -0.22 12.40", "第三章 管理层讨论与分析"]],
                          {"revenue": 168804e6, "net_profit": 34381e6, "net_profit_prev": 34309e6,
                           "net_profit_ex": 34495e6, "ocf": 155417e6, "net_profit_change_pct": 0.21, "eps": 0.71,
                           "roe": 6.59, "gross_margin": None, "gross_margin_prev": None}),
    # an insurer: 人民币千元 in a group header, 归属于母公司股东的净利润, a loss in parentheses
    "insurer_thousands": ([COVER + ["三、主要会计数据和财务指标", "2023年 2022年 本年比上年增减(%) 2021年",
                                    "经营业绩（人民币千元）", "营业收入 9,876,543 9,000,000 9.74 8,000,000",
                                    " 已赚保费 8,000,000 7,500,000 6.67 7,000,000",
                                    "归属于母公司股东的净利润 (344,587) 120,000 不适用 100,000",
                                    "第三节 管理层讨论与分析"]],
                          {"revenue": 9876543e3, "net_profit": -344587e3, "net_profit_prev": 120000e3,
                           "gross_margin": None}),
    # restated: 调整前 and 调整后 beside each other: last year is 调整后, the change read from its own column
    "restated": ([COVER + ["六、主要会计数据和财务指标", "公司是否需追溯调整或重述以前年度会计数据：√ 是 □ 否",
                           "追溯调整或重述原因：同一控制下企业合并", "2023 年", "2022 年 本年比上年", "增减", "2021 年",
                           "调整前 调整后 调整后 调整前 调整后",
                           "营业收入（元） 39,608,340,979.04 36,683,290,538.29 37,036,329,015.10 6.94% "
                           "33,713,780,563.65 33,713,780,563.65",
                           "归属于上市公司股东的净",
                           "利润（元） 992,955,495.15 1,055,368,991.36 1,144,409,195.72 -13.23% "
                           "1,845,279,650.89 1,845,279,650.89",
                           "基本每股收益（元/股） 0.62 0.66 0.72 -13.89% 1.15 1.15",
                           "加权平均净资产收益率 7.22% 8.32% 8.99% -1.77% 15.87% 15.87%",
                           "七、境内外会计准则下会计数据差异"]],
                 {"revenue": 39608340979.04, "net_profit": 992955495.15, "net_profit_prev": 1144409195.72,
                  "net_profit_change_pct": -13.23, "eps": 0.62, "roe": 7.22}),
    # the statement's note references in Chinese numerals (七、（四十一）, （七）.43) between a row's label and figures
    "statement_chinese_note_references": ([COVER + [
        "七、近三年主要会计数据和财务指标", "(一) 主要会计数据", "单位：元 币种：人民币",
        "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
        "营业收入 1,000,000.00 800,000.00 25.00 700,000.00", "八、境内外会计准则下会计数据差异"],
        ["第十一节 财务报告", "合并利润表", "2023 年 1—12 月", "单位:元 币种:人民币", "项目 附注 本期发生额 上期发生额",
         "一、营业总收入 1,000,000.00 800,000.00", "其中：营业收入 七、（四十一） 1,000,000.00 800,000.00",
         "二、营业总成本 900,000.00 700,000.00", "其中：营业成本 （七）.43 600,000.00 520,000.00",
         "母公司利润表"]],
        {"revenue": 1000000.0, **GM}),
    # the header the last lines of a page, its rows on the next under a running header and a folio that
    # name a year and a number: neither is a column
    "header_at_a_page_s_foot": ([COVER + ["七、近三年主要会计数据和财务指标", "(一) 主要会计数据",
                                          "单位：元 币种：人民币", "主要会计数据 2023年 2022年", "本期", "比上",
                                          "年同", "期增", "减(%)", "2021年"],
                                 ["2023 年年度报告", "7 / 210",
                                  "营业收入 20,800,941,121.10 15,516,479,019.57 34.06 12,847,346,065.58",
                                  "归属于上市公司股东的净",
                                  "利润 5,544,565,705.95 5,802,730,955.64 -4.45 2,188,922,701.47",
                                  "(二) 主要财务指标", "主要财务指标 2023年 2022年 本期比上年同期增减(%) 2021年",
                                  "基本每股收益（元／股） 0.31 0.32 -3.75 0.14", "八、境内外会计准则下会计数据差异"]],
                                {"revenue": 20800941121.10, "net_profit": 5544565705.95,
                                 "net_profit_prev": 5802730955.64, "net_profit_change_pct": -4.45, "eps": 0.31}),
    # the unit in a group header in 万元 (no 人民币, nothing after it); 主要会计数据（千元）
    "group_header_ten_thousands": ([COVER + ["七、主要会计数据和财务指标", "2023年 2022年 本年比上年增减(%) 2021年",
                                             "经营业绩（万元）", "营业收入 52,310.50 48,002.10 8.98 40,100.00",
                                             "归属于上市公司股东的净利润 3,120.40 2,050.20 52.20 2,300.00",
                                             "经营活动产生的现金流量净额 1,200.00 900.00 33.33 800.00",
                                             "八、境内外会计准则下会计数据差异"]],
                                   {"revenue": 523105000.0, "net_profit": 31204000.0, "net_profit_prev": 20502000.0,
                                    "ocf": 12000000.0, "net_profit_change_pct": 52.20}),
    "group_header_thousands": ([COVER + ["七、近三年主要会计数据和财务指标", "2023年 2022年 本年比上年增减(%) 2021年",
                                         "主要会计数据（千元）", "营业收入 9,876,543 9,000,000 9.74 8,000,000",
                                         "归属于上市公司股东的净利润 (344,587) 120,000 不适用 100,000",
                                         "八、境内外会计准则下会计数据差异"]],
                               {"revenue": 9876543e3, "net_profit": -344587e3, "net_profit_prev": 120000e3}),
    # no 单位 line: each label wrapped over three lines, the numbers on the middle one, its unit on the last
    "three_line_labels": ([COVER + ["六、主要会计数据和财务指标", "2023 年 2022 年 本年比上年增减 2021 年",
                                    "营业收入", "2,941,412,770.30 2,718,608,796.51 8.20% 2,308,922,170.29", "（元）",
                                    "归属于上市公司",
                                    "股东的净利润 770,782,185.09 605,003,820.78 27.40% 342,217,155.60",
                                    "（元）", "归属于上市公司股东",
                                    "的扣除非经常性损益 751,209,860.23 604,944,470.09 24.18% 301,310,316.13",
                                    "的净利润（元）", "经营活动产生的",
                                    "现金流量净额 612,399,095.31 791,449,237.66 -22.62% 118,141,514.53", "（元）",
                                    "基本每股收益 0.48 0.38 26.32% 0.22", "（元/股）",
                                    "七、境内外会计准则下会计数据差异"]],
                          {"revenue": 2941412770.30, "net_profit": 770782185.09, "net_profit_prev": 605003820.78,
                           "net_profit_ex": 751209860.23,
                           "ocf": 612399095.31, "net_profit_change_pct": 27.40, "eps": 0.48}),
    # an H-share's table in 港币 first, then the 人民币 one: the 人民币 figures are kept, the 港币 never taken
    "hkd_then_rmb": ([COVER + ["六、主要会计数据和财务指标", "单位：港币千元", "2023年 2022年 本年比上年增减(%) 2021年",
                               "营业收入 10,816,500 10,022,100 7.93 9,100,000",
                               "归属于上市公司股东的净利润 1,320,400 1,100,200 20.01 900,000"],
                      ["（续）主要会计数据", "单位：人民币千元", "2023年 2022年 本年比上年增减(%) 2021年",
                       "营业收入 9,876,543 9,000,000 9.74 8,000,000",
                       "归属于上市公司股东的净利润 1,205,600 1,004,500 20.02 800,000",
                       "八、境内外会计准则下会计数据差异"]],
                     {"revenue": 9876543e3, "net_profit": 1205600e3, "net_profit_prev": 1004500e3,
                      "net_profit_change_pct": 20.02}),
    # the 合并利润表 in 港币: no gross margin taken from it (said why), the key figures in 人民币 kept
    "hkd_statement": ([COVER + ["六、主要会计数据和财务指标", "单位：元", "2023年 2022年 本年比上年增减(%) 2021年",
                                "营业收入 1,000,000.00 800,000.00 25.00 700,000.00",
                                "七、境内外会计准则下会计数据差异"],
                       ["第十节 财务报告", "3、合并利润表", "单位：港币元", "项目 附注 2023 年度 2022 年度",
                        "其中：营业收入 30 1,100,000.00 880,000.00", "其中：营业成本 30 660,000.00 572,000.00"]],
                      {"revenue": 1000000.0, "gross_margin": None, "gross_margin_prev": None}),
    # a row with a cell left out (the header has four columns, the row three): not placed, so missing
    "short_row": ([COVER + ["七、近三年主要会计数据和财务指标", "单位：元 币种：人民币",
                            "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
                            "营业收入 1,000,000.00 800,000.00 25.00 700,000.00",
                            "归属于上市公司股东的净利润 120,000.00 9.09 100,000.00", "八、境内外会计准则下会计数据差异",
                            "公司全年实现归属于上市公司股东的净利润12万元。"]],
                  {"revenue": 1000000.0, "net_profit": 120000.0}),
    # spaces inside labels (营 业 收 入, 归属于 上市公司股 东的净利润) and 扣非 without 的 after 股东
    "label_spaces_no_de": ([COVER + ["七、近三年主要会计数据和财务指标", "(一) 主要会计数据", "单位：元 币种：人民币",
        "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
        "营 业 收 入 1,000,000.00 800,000.00 25.00 700,000.00",
        "归属于 上市公司股 东的净利润 120,000.00 100,000.00 20.00 90,000.00",
        "归属于母公司股东扣除非经常性损益的净利润 110,000.00 95,000.00 15.79 80,000.00",
        "八、境内外会计准则下会计数据差异"]],
        {"revenue": 1000000.0, "net_profit": 120000.0, "net_profit_prev": 100000.0, "net_profit_ex": 110000.0,
         "net_profit_change_pct": 20.0}),
    # changes printed (10.90%) and -1.30 个百分点, spaced
    "change_parentheses": ([COVER + ["六、主要会计数据和财务指标", "单位：元", "2023年 2022年 本年比上年增减 2021年",
        "营业收入（元） 1,000,000.00 1,122,334.00 (10.90%) 700,000.00",
        "归属于上市公司股东的净利润（元） 120,000.00 134,680.00 (10.90%) 90,000.00",
        "基本每股收益（元/股） 0.48 0.52 (7.69%) 0.30",
        "加权平均净资产收益率 7.22% 8.52% -1.30 个百分点 9.00%",
        "七、境内外会计准则下会计数据差异"]],
        {"revenue": 1000000.0, "net_profit": 120000.0, "net_profit_prev": 134680.0, "net_profit_change_pct": -10.90,
         "eps": 0.48, "roe": 7.22}),
    # a label broken by the page break: its end on the next page, after the running header and a folio
    "label_across_page": ([COVER + ["七、近三年主要会计数据和财务指标", "(一) 主要会计数据", "单位：元 币种：人民币",
        "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年",
        "营业收入 1,000,000.00 800,000.00 25.00 700,000.00", "归属于上市公司股东的净"],
        ["2023 年年度报告", "8 / 200", "利润 120,000.00 100,000.00 20.00 90,000.00",
         "经营活动产生的现金流量净额 300,000.00 250,000.00 20.00 200,000.00",
         "八、境内外会计准则下会计数据差异"]],
        {"revenue": 1000000.0, "net_profit": 120000.0, "net_profit_prev": 100000.0, "net_profit_change_pct": 20.0,
         "ocf": 300000.0}),
    # SSE's restated form: 调整后 / 调整前 under last year only, five numbers for three years and a change
    "sse_restated_prior_only": ([COVER + [
        "七、近三年主要会计数据和财务指标", "(一) 主要会计数据", "单位：元 币种：人民币",
        "主要会计数据 2023年 2022年 本期比上年同期增减(%) 2021年", "调整后 调整前",
        "营业收入 1,000,000.00 800,000.00 790,000.00 25.00 700,000.00",
        "归属于上市公司股东的净利润 120,000.00 100,000.00 98,000.00 20.00 90,000.00",
        "八、境内外会计准则下会计数据差异"]],
        {"revenue": 1000000.0, "net_profit": 120000.0, "net_profit_prev": 100000.0, "net_profit_change_pct": 20.0}),
    # the 合并利润表's title the last line of a page, its rows on the next under a running header
    "statement_title_page_end": ([COVER + [
        "六、主要会计数据和财务指标", "单位：元", "2023年 2022年 本年比上年增减 2021年",
        "营业收入（元） 1,000,000.00 800,000.00 25.00% 700,000.00", "七、境内外会计准则下会计数据差异"],
        ["第十节 财务报告", "2、合并利润表"],
        ["2023 年年度报告全文", "单位：元", "项目 附注 2023 年度 2022 年度",
         "一、营业总收入 1,000,000.00 800,000.00", "其中：营业收入 30 1,000,000.00 800,000.00",
         "二、营业总成本 900,000.00 700,000.00", "其中：营业成本 30 600,000.00 520,000.00"], PARENT],
        {"revenue": 1000000.0, **GM}),
    # a change column too narrow: its figure touches the next (8.20%2,308,922,170.29, 个百分点6.90%)
    "glued_cells": ([COVER + ["六、主要会计数据和财务指标", "2023 年 2022 年 本年比上年增减 2021 年",
        "营业收入（元） 2,941,412,770.30 2,718,608,796.51 8.20%2,308,922,170.29",
        "归属于上市公司股东的净利润（元） 770,782,185.09 605,003,820.78 27.40%342,217,155.60",
        "基本每股收益（元/股） 0.48 0.38 26.32%0.22",
        "加权平均净资产收益率 14.07% 11.35% 增加2.72个百分点6.90%",
        "七、境内外会计准则下会计数据差异"]],
        {"revenue": 2941412770.30, "net_profit": 770782185.09, "net_profit_prev": 605003820.78,
         "net_profit_change_pct": 27.40, "eps": 0.48, "roe": 14.07}),
    # two money figures run together (no way to tell where one ends): missing, with the reason
    "figures_run_together": ([COVER + ["六、主要会计数据和财务指标", "2023 年 2022 年 本年比上年增减 2021 年",
        "营业收入（元） 2,941,412,770.30 2,718,608,796.51 8.20% 2,308,922,170.29",
        "归属于上市公司股东的净利润（元） 770,782,185.09605,003,820.78 27.40% 342,217,155.60",
        "七、境内外会计准则下会计数据差异"]],
        {"revenue": 2941412770.30, "net_profit": 770782185.09}),
    # label variants: 扣非 with 扣除非经常性损益后 first, 经营活动现金流量净额 without 产生的
    "label_order_variants": ([COVER + ["六、主要会计数据和财务指标", "单位：元", "2023年 2022年 本年比上年增减 2021年",
        "营业收入 1,000,000.00 800,000.00 25.00% 700,000.00",
        "归属于上市公司股东的净利润 120,000.00 100,000.00 20.00% 90,000.00",
        "扣除非经常性损益后归属于上市公司股东的净利润 110,000.00 95,000.00 15.79% 80,000.00",
        "经营活动现金流量净额 300,000.00 250,000.00 20.00% 200,000.00",
        "七、境内外会计准则下会计数据差异"]],
        {"revenue": 1000000.0, "net_profit": 120000.0, "net_profit_prev": 100000.0, "net_profit_change_pct": 20.0,
         "net_profit_ex": 110000.0, "ocf": 300000.0}),
    # negatives with the minus sign (U+2212), in the key table and in the 合并利润表
    "unicode_minus": ([COVER + ["六、主要会计数据和财务指标", "单位：元", "2023年 2022年 本年比上年增减 2021年",
        "营业收入 1,000,000.00 800,000.00 25.00% 700,000.00",
        "归属于上市公司股东的净利润 \u2212120,000.00 100,000.00 \u2212220.00% 90,000.00",
        "基本每股收益（元/股） \u22120.12 0.10 \u2212220.00% 0.09",
        "七、境内外会计准则下会计数据差异"],
        ["第十节 财务报告", "3、合并利润表", "单位：元", "项目 附注 2023 年度 2022 年度",
         "一、营业总收入 1,000,000.00 800,000.00", "其中：营业收入 30 1,000,000.00 800,000.00",
         "二、营业总成本 1,120,000.00 700,000.00", "其中：营业成本 30 1,100,000.00 520,000.00",
         "1.归属于母公司股东的净利润 \u2212120,000.00 100,000.00"], PARENT],
        {"revenue": 1000000.0, "net_profit": -120000.0, "net_profit_prev": 100000.0, "net_profit_change_pct": -220.0,
         "eps": -0.12, "gross_margin": -10.0, "gross_margin_prev": 35.0}),
    # the statements without a key-figure table: the figures they give, each with the statement's quote
    "statements_alone": ([COVER + ["公司简介"], STATEMENT + ["1.归属于母公司股东的净利润 120,000.00 100,000.00"],
                          PARENT],
                         {"revenue": 1000000.0, "net_profit": 120000.0, "net_profit_prev": 100000.0, **GM}),
    # one statement of the group's and the parent's (合并及公司利润表): the group's columns, first of four
    "combined_and_company_statement": ([COVER + [
        "六、主要会计数据和财务指标", "单位：元", "2023年 2022年 本年比上年增减(%) 2021年",
        "营业收入 1,000,000.00 800,000.00 25.00 700,000.00", "七、境内外会计准则下会计数据差异"],
        ["第十节 财务报告", "合并及公司利润表", "单位：元", "项目 附注 本集团 本公司",
         "2023年度 2022年度 2023年度 2022年度",
         "一、营业收入 30 1,000,000.00 800,000.00 400,000.00 300,000.00",
         "减：营业成本 30 600,000.00 520,000.00 100,000.00 90,000.00"]],
        {"revenue": 1000000.0, **GM}),
}


# a B-share's table in 美元 only (币种：美元): flagged, never converted nor taken as 人民币
USD_ONLY = [COVER + ["六、主要会计数据和财务指标", "单位：元 币种：美元", "2023年 2022年 本年比上年增减(%) 2021年",
                     "营业收入 200,193,984.19 179,006,280.31 11.84 170,000,000.00",
                     "归属于上市公司股东的净利润 10,523,321.20 1,183,162.28 789.42 5,000,000.00",
                     "基本每股收益 0.057 0.006 850.00 0.03", "加权平均净资产收益率 15.07% 1.82% 13.25% 5.00%",
                     "七、境内外会计准则下会计数据差异"]]
# an infographic page before the table repeating its figures as a chart's labels, oldest year first (one
# row under no header at all, one under the chart's years): the table's rows are taken, with its page
INFOGRAPHIC = [["第二章 会计数据和财务指标摘要", "主要会计数据和财务指标一览", "单位：人民币百万元",
                "归属于本行股东的净利润 53,819 34,309 34,381", "2021年 2022年 2023年",
                "营业收入 180,441 184,951 168,804"],
               LAYOUTS["bank_group_header"][0][1]]


def score(layouts: dict, write, tiny_model_path, tmp, first_code: int):
    """Each layout a PDF (``write(path, pages)``) with its gold, scored by ``xladdin eval`` through the CLI:
    (each layout's row, the report, what the command printed)."""
    gold = []
    for i, (name, (pages, figures)) in enumerate(layouts.items()):
        write(tmp / f"{name}.pdf", pages)
        gold.append({"file": f"{name}.pdf", "code": f"{first_code + i}", "name": name, **figures})
    (tmp / "gold.jsonl").write_text("\n".join(json.dumps(g, ensure_ascii=False) for g in gold), encoding="utf-8")
    r = cli(["eval", str(tmp / "gold.jsonl"), "-o", str(tmp / "eval.json")], tiny_model_path, tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp / "eval.json").read_text(encoding="utf-8"))
    return {row["file"][:-4]: row for row in report["rows"]}, report, r.stdout


@pytest.fixture(scope="module")
def scored(tiny_model_path, tmp_path_factory):
    return score(LAYOUTS, make_pdf, tiny_model_path, tmp_path_factory.mktemp("layouts"), 600100)


def verdicts(row: dict) -> dict[str, str]:
    return {name: v["verdict"] for name, v in row.items() if isinstance(v, dict) and v["verdict"] != "none"}


@pytest.mark.parametrize("layout", ["row_unit_wrapped", "unit_line_two_pages", "bank_group_header",
                                    "insurer_thousands", "restated", "group_header_ten_thousands",
                                    "group_header_thousands", "three_line_labels", "hkd_then_rmb",
                                    "hkd_statement", "header_at_a_page_s_foot",
                                    "statement_chinese_note_references", "change_cut_mid_word",
                                    "label_spaces_no_de", "change_parentheses", "label_across_page",
                                    "sse_restated_prior_only", "statement_title_page_end", "glued_cells",
                                    "label_order_variants", "unicode_minus", "statements_alone",
                                    "combined_and_company_statement"])
def test_every_figure_of_the_layout_is_right(scored, layout):
    rows, _, _ = scored
    assert set(verdicts(rows[layout]).values()) == {"right"}, verdicts(rows[layout])
    assert verdicts(rows[layout]).keys() == {k for k, v in LAYOUTS[layout][1].items() if v is not None}


def test_no_layout_gives_a_wrong_figure(scored):
    _, report, stdout = scored
    assert all(f["wrong"] == 0 for f in report["fields"].values()), stdout


def test_restated_columns_take_adjusted_and_say_so(scored):
    notes = scored[0]["restated"]["notes"]
    assert "上年数有调整前/调整后两列, 上年取调整后(重述)数" in notes


def test_a_bank_has_no_gross_margin_and_says_why(scored):
    row = scored[0]["bank_group_header"]
    assert row["gross_margin"]["read"] is None and row["gross_margin_prev"]["read"] is None
    assert "缺毛利率: 银行/保险的利润表无营业成本, 不计毛利率" in row["notes"]


def test_a_statement_in_hkd_gives_no_gross_margin_and_says_why(scored):
    notes = scored[0]["hkd_statement"]["notes"]
    assert "缺毛利率: 合并利润表以HKD计, 未换算为人民币, 不计毛利率「单位：港币元」(第2页)" in notes


def test_gross_margin_comes_from_the_consolidated_statement_not_the_parents(scored):
    row = scored[0]["row_unit_wrapped"]
    assert row["gross_margin"]["read"] == 40.0 and row["gross_margin_prev"]["read"] == 35.0  # the parent's: 75, 70
    assert row["roe"]["read"] == 14.07  # the row whose change wrapped (增加2.72个 / 百分点)


def test_a_row_that_cannot_be_placed_is_missing_with_the_reason_and_no_prose_stands_in(scored):
    row = scored[0]["short_row"]
    assert row["net_profit"]["verdict"] == "missing"  # the prose's 12万元 is not taken either
    assert "本行3个数, 表头为4列, 无法确定各数所在年份" in row["notes"]
    assert row["revenue"]["verdict"] == "right"


def screen_one(tiny_model_path, tmp_path, row: str, pages: list[list[str]]) -> dict:
    """``xladdin screen --reports`` of a one-row pool (``row``: 代码,名称,行业) whose report is a PDF of
    ``pages``: the report's row."""
    (tmp_path / "reports").mkdir()
    make_pdf(tmp_path / "reports" / f"{row.split(',')[0]}_2023.pdf", pages)
    pool = tmp_path / "pool.csv"
    pool.write_text(f"代码,名称,行业\n{row}\n", encoding="utf-8")
    r = cli(["screen", str(pool), "--reports", str(tmp_path / "reports"), "-o", str(tmp_path / "out.json")],
            tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    (found,) = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    return found


def test_a_money_figure_in_another_currency_is_flagged_never_converted(tiny_model_path, tmp_path):
    row = screen_one(tiny_model_path, tmp_path, "200512,闽灿坤B,家电", USD_ONLY)
    assert row["营收(亿元) revenue"] is None and row["净利润(亿元) net profit"] is None
    assert row["上年净利润(亿元) prior-year profit"] is None and row["文本EPS(元) EPS in text"] is None
    notes = row["说明 notes"]
    assert "营收: 以USD计, 未换算为人民币「营业收入 200,193,984.19 179,006,280.31 11.84 170,000,000.00」" in notes
    assert "上年净利润: 以USD计, 未换算为人民币" in notes and "EPS: 以USD计, 未换算为人民币" in notes
    assert row["文本ROE(%) ROE in text"] == 15.07  # a ratio is no currency's


def test_the_key_figure_table_s_page_is_preferred_over_an_infographic_s(tiny_model_path, tmp_path):
    row = screen_one(tiny_model_path, tmp_path, "600016,示例银行,银行", INFOGRAPHIC)
    assert row["营收(亿元) revenue"] == 1688.04 and row["净利润(亿元) net profit"] == 343.81  # not 1804.41, 538.19
    evidence = row["出处 evidence"]
    assert "营收「营业收入 168,804 184,951 -8.73 180,441」(第2页)" in evidence
    assert "净利润「归属于本行股东的净利润 34,381 34,309 0.21 53,819」(第2页)" in evidence
    assert "(第1页)" not in evidence


def test_the_report_s_roe_feeds_the_rules_where_the_pool_has_none_and_the_row_says_from_where(tiny_model_path,
                                                                                            tmp_path):
    from test_documents import PAGE_1, PAGE_2

    from xladdin.testing import write_report_pdf

    (tmp_path / "reports").mkdir()
    write_report_pdf(tmp_path / "reports" / "603339_年报.pdf")  # ROE 8.10, two years of profit
    make_pdf(tmp_path / "reports" / "688001_年报.pdf", [PAGE_1, PAGE_2])  # ROE -4.10 on page 2
    pool = tmp_path / "pool.csv"
    pool.write_text("代码,名称,行业,市盈率TTM\n603339,四方科技,专用设备,20\n688001,华兴源创,设备,20\n"
                    "600000,浦发银行,银行,5\n", encoding="utf-8")
    r = cli(["screen", str(pool), "--reports", str(tmp_path / "reports"), "-o", str(tmp_path / "out.json")],
            tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    positive, negative, without = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))["rows"]
    # ROE 8.1 is between the rules' 5 and 15: 中 because of ROE, no longer for missing data
    assert positive["风险等级 risk"] == "中" and "ROE 8.1% < 15%" in positive["规则依据 rule basis"]
    assert "规则取自报告: ROE表格8.1" in positive["规则依据 rule basis"]
    assert "缺ROE" not in (positive["说明 notes"] or "")
    assert negative["风险等级 risk"] == "高" and "ROE -4.1% < 5%" in negative["规则依据 rule basis"]
    assert "ROE表格-4.1(第2页)" in negative["规则依据 rule basis"]  # the page it stands on
    assert "缺ROE" in without["说明 notes"] and "规则取自报告" not in without["规则依据 rule basis"]


def test_a_row_whose_figures_run_together_is_missing_and_says_so(scored):
    row = scored[0]["figures_run_together"]
    assert verdicts(row) == {"revenue": "right", "net_profit": "missing"}, verdicts(row)
    assert "缺净利润: 本行的数无法分开, 未读「归属于上市公司股东的净利润（元） 770,782,185.09605" in row["notes"]


def test_a_loss_printed_with_the_minus_sign_agrees_with_its_statement(tiny_model_path, tmp_path):
    row = screen_one(tiny_model_path, tmp_path, "600900,示例,电力", LAYOUTS["unicode_minus"][0])
    assert row["净利润(亿元) net profit"] == -0.0012 and "数据存疑" not in row["标记 flags"]
    # checked twice: the statement's row, as printed, beside the table's
    assert "=合并利润表「1.归属于母公司股东的净利润 \u2212120,000.00 100,000.00」(第2页)" in row["出处 evidence"]
