import math

import pytest

from xladdin.errors import InputError
from xladdin.reading.pool import is_st_name, normalize_code, parse_flag, parse_number


@pytest.mark.parametrize(
    "raw, code",
    [
        ("600519", "600519.SH"),
        (600519, "600519.SH"),
        (600519.0, "600519.SH"),
        ("000001", "000001.SZ"),
        (1, "000001.SZ"),  # Excel dropped the leading zeros
        ("300750", "300750.SZ"),
        ("688981", "688981.SH"),
        ("430047", "430047.BJ"),
        ("830799", "830799.BJ"),
        ("920001", "920001.BJ"),
        ("600519.SH", "600519.SH"),
        ("600519.ss", "600519.SH"),
        ("sh600519", "600519.SH"),
        ("６００５１９", "600519.SH"),  # full-width digits
        (" 000858.sz ", "000858.SZ"),
    ],
)
def test_code_normalisation(raw, code):
    assert normalize_code(raw) == code


@pytest.mark.parametrize("raw", ["abc", "6005191", "600519.SZ", "SH600519.SH", "", None, "123456", "1.5"])
def test_bad_codes_name_the_field(raw):
    with pytest.raises(InputError) as e:
        normalize_code(raw)
    assert str(e.value).startswith("code ")


@pytest.mark.parametrize(
    "raw, value",
    [
        (12.5, 12.5),
        ("32.78%", 32.78),
        ("1,234.5", 1234.5),
        ("３２．７８", 32.78),
        ("  -3 ", -3.0),
        ("N/A", None),
        ("--", None),
        ("", None),
        ("   ", None),
        (None, None),
        (float("nan"), None),
        ("1e3", 1000.0),
    ],
)
def test_numbers(raw, value):
    assert parse_number(raw, "roe") == value


@pytest.mark.parametrize("raw", ["abc", "12.3.4", True, float("inf"), "-inf", "1e999", "12亿"])
def test_bad_numbers_name_the_field(raw):
    with pytest.raises(InputError, match=r"^pe_ttm "):
        parse_number(raw, "pe_ttm")


def test_flags_and_st_names():
    assert parse_flag("是", "st") is True and parse_flag(0, "st") is False and parse_flag("", "st") is None
    with pytest.raises(InputError, match="^st "):
        parse_flag("maybe", "st")
    for name in ("ST易购", "*ST海航", "ＳＴ康美", "S*ST前锋", "st华仪"):
        assert is_st_name(name)
    for name in ("贵州茅台", "BEST科技", "", None):
        assert not is_st_name(name)
    assert math.isfinite(parse_number("0", "x"))
