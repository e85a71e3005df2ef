"""A report's period and publication day, read in code from a pool's cells, a file name and a text."""

import datetime as dt

import pytest

from xladdin.periods import Period, from_name, from_text, parse_date, parse_period


@pytest.mark.parametrize("name, period, source, published", [
    ("2021-04-23__贵州茅台__2020年年度报告.pdf", "2020年度", "文件名", dt.date(2021, 4, 23)),
    ("2021-04-23__贵州茅台__年度报告.pdf", "2020年度", "文件名: 由公告日推断", dt.date(2021, 4, 23)),
    ("2021-08-30__600519__半年度报告.pdf", "2021半年度", "文件名: 由公告日推断", dt.date(2021, 8, 30)),
    ("600519_2021年报.pdf", "2021年度", "文件名", None),
    ("600519_2021年第一季度报告.pdf", "2021一季度", "文件名", None),
    ("20211030_600519_2021年三季报.txt", "2021三季度", "文件名", dt.date(2021, 10, 30)),
    ("688001_年报.pdf", None, None, None),  # a code is no date
])
def test_a_file_name_as_the_exchanges_write_it(name, period, source, published):
    got = from_name(name)
    assert (got.period and got.period.label, got.period_source, got.published) == (period, source, published)


def test_a_text_gives_its_cover_title_and_the_day_its_board_approved_it():
    got = from_text("贵州茅台酒股份有限公司\n2021年年度报告\n……\n董事会批准报送日期：2022年3月30日")
    assert (got.period, got.period_source) == (Period(2021, "A"), "正文: 封面标题")
    assert (got.published, got.published_source) == (dt.date(2022, 3, 30), "正文: 董事会批准报送日期")
    said = from_text("2021年第一季度报告\n公司第八届董事会于2021年4月23日召开第十次会议，审议通过本报告")
    assert (said.period, said.published, said.published_source) == (Period(2021, "Q1"), dt.date(2021, 4, 23),
                                                                      "正文: 董事会审议日")
    signed = from_text("……\n董事长：张三\n某某股份有限公司\n2021年4月23日")
    assert (signed.published, signed.published_source) == (dt.date(2021, 4, 23), "正文: 董事长签署日")
    assert from_text("营业收入12亿元") == from_name(None)


@pytest.mark.parametrize("cell, label", [("2021年报", "2021年度"), ("2021Q3", "2021三季度"), ("20211231", "2021年度"),
                                         ("2021-06-30", "2021半年度"), (20210331, "2021一季度"), ("2021", "2021年度"),
                                         ("2021中报", "2021半年度"), ("2021-05-01", None), ("", None)])
def test_a_period_cell(cell, label):
    got = parse_period(cell)
    assert (got.label if got else None) == label


@pytest.mark.parametrize("cell", ["2021-04-23", "2021/4/23", "20210423", 20210423, 20210423.0, "2021年4月23日",
                                  dt.datetime(2021, 4, 23, 0, 0), "2021-04-23 00:00:00"])
def test_a_date_cell(cell):
    assert parse_date(cell) == dt.date(2021, 4, 23)


def test_not_a_date():
    assert parse_date("abc") is None and parse_date(None) is None and parse_date("2021-02-30") is None
