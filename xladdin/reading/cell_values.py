"""Parsing of spreadsheet values into clean input fields.

Excel and CSV hand us numbers as floats, strings with ``%`` or thousands
separators, full-width digits, placeholders such as ``N/A`` or ``--``, and
stock codes that lost their leading zeros. Every parser here either returns a
clean value (``None`` for a missing one) or raises ``InputError`` naming the field.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

from ..errors import InputError

MISSING_TOKENS = frozenset({"", "n/a", "na", "nan", "none", "null", "-", "--", "---", "—", "——", "#n/a", "无", "暂无"})
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(?:(,)\d{3}(?:\1\d{3})*|( )\d{3}(?:\2\d{3})*)(\.\d+)?%?$")
# Larger than any figure a stock pool holds (1e15 亿元 is a thousand times world GDP): past this a
# value is a typo or a placeholder, and it would overflow the exact decimal arithmetic of the rules.
MAX_ABS = 1e15

# Exchange by the leading digits of a six-digit A-share (or B-share) code.
EXCHANGE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("60", "SH"), ("68", "SH"), ("90", "SH"),
    ("00", "SZ"), ("30", "SZ"), ("20", "SZ"),
    ("43", "BJ"), ("83", "BJ"), ("87", "BJ"), ("88", "BJ"), ("92", "BJ"),
)
_ST_NAME = re.compile(r"^(\*|S\*?)?ST")
_SUFFIXES = {"SH": "SH", "SS": "SH", "SZ": "SZ", "BJ": "BJ"}


def text_or_none(value: Any) -> str | None:
    """Normalise a cell to stripped NFKC text; ``None`` when blank or a placeholder."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    text = unicodedata.normalize("NFKC", str(value)).strip()
    return None if text.lower() in MISSING_TOKENS else text


def required_text(value: Any, field: str, missing: str = "is empty") -> str:
    """Like ``text_or_none``, but a blank is an ``InputError`` naming the field."""
    text = text_or_none(value)
    if text is None:
        raise InputError(field, missing)
    return text


def parse_number(value: Any, field: str) -> float | None:
    """A finite number, or ``None`` when missing. ``"32.78%"`` → 32.78, ``"1,234.5"`` → 1234.5."""
    if isinstance(value, bool):
        raise InputError(field, f"is not a number: {value!r}")
    if isinstance(value, int | float):
        if isinstance(value, float) and math.isnan(value):
            return None
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float
            number = math.inf
        return _bounded(number, value, field)
    text = text_or_none(value)
    if text is None:
        return None
    cleaned = text.replace(",", "").replace(" ", "").removesuffix("%")
    if not _NUMBER.match(cleaned):
        raise InputError(field, f"is not a number: {shown(text)!r}")
    if ("," in text or " " in text) and not _GROUPED.match(text):
        # "12,5" is 12.5 in many locales and 125 in none: never guess
        raise InputError(field, f"is ambiguous: {shown(text)!r} (a comma or space only separates thousands, in "
                         "groups of three: write 12.5 or 1,234.5)")
    return _bounded(float(cleaned), text, field)


def shown(text: str, limit: int = 40) -> str:
    """``text`` cut for an error message."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded(number: float, given: Any, field: str) -> float:
    if math.isinf(number):
        raise InputError(field, f"is not a finite number: {shown(str(given))!r}")
    if abs(number) >= MAX_ABS:
        raise InputError(field, f"is out of range: {shown(str(given))!r} (|value| must be below {MAX_ABS:.0e})")
    return number


def parse_flag(value: Any, field: str) -> bool | None:
    """Yes/no cells: TRUE/FALSE, 1/0, 是/否, Y/N, ST/blank."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and not (isinstance(value, float) and math.isnan(value)):
        if value in (0, 1):
            return bool(value)
        raise InputError(field, f"is not a yes/no value: {value!r}")
    text = text_or_none(value)
    if text is None:
        return None
    low = text.lower()
    if low in {"true", "1", "yes", "y", "是", "st", "*st", "1.0"}:
        return True
    if low in {"false", "0", "no", "n", "否", "0.0"}:
        return False
    raise InputError(field, f"is not a yes/no value: {text!r}")


def normalize_code(value: Any, field: str = "code") -> str:
    """``600519`` → ``600519.SH``; ``1`` (Excel dropped the zeros) → ``000001.SZ``; ``SH600519`` too."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = text_or_none(value)
    if text is None:
        raise InputError(field, "is missing")
    raw = text.upper().replace(" ", "")
    exchange = None
    m = re.fullmatch(r"(SH|SZ|BJ|SS)?(\d{1,6})(?:\.(SH|SZ|BJ|SS))?", raw)
    if not m or (m.group(1) and m.group(3)):
        raise InputError(field, f"is not an A-share code: {text!r} (expected e.g. 600519 or 600519.SH)")
    digits = m.group(2).zfill(6)
    given = m.group(1) or m.group(3)
    for prefix, ex in EXCHANGE_PREFIXES:
        if digits.startswith(prefix):
            exchange = ex
            break
    if given:
        given = _SUFFIXES[given]
        if exchange is not None and given != exchange:
            raise InputError(field, f"{text!r}: {digits} trades on {exchange}, not {given}")
        exchange = given
    if exchange is None:
        raise InputError(field, f"{text!r}: cannot tell the exchange of {digits}; write it as {digits}.SH/.SZ/.BJ")
    return f"{digits}.{exchange}"


def is_st_name(name: str | None) -> bool:
    """ST, *ST and S*ST names (full-width letters too)."""
    if not name:
        return False
    return _ST_NAME.match(unicodedata.normalize("NFKC", name).upper().replace(" ", "")) is not None


# a sentence: up to and including its end mark, or the text's last words without one
_SENTENCE = re.compile(r"[^。！？；;!?\n]*[。！？；;!?\n]|[^。！？；;!?\n]+\Z")
_DIGIT = re.compile(r"\d")


def trim_text(text: str, limit: int) -> tuple[str, bool]:
    """Fit ``text`` into ``limit`` characters: keep the head (60% of the budget),
    then the later sentences that contain digits, in order, while they fit."""
    if len(text) <= limit:
        return text, False
    head = text[: int(limit * 0.6)]
    budget = limit - len(head) - 1
    sentences = _SENTENCE.finditer(text, len(head))
    next(sentences, None)  # drop the sentence the head cut through
    kept: list[str] = []
    for m in sentences:  # a sentence too long for what is left is passed by its length, never copied
        if budget < 4:
            break
        if m.end() - m.start() <= budget and _DIGIT.search(text, m.start(), m.end()):
            kept.append(m.group())
            budget -= m.end() - m.start()
    return head + "…" + "".join(kept), True
