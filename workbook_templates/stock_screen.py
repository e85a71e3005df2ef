"""Companion of stock_screen.xlsx: the xlwings ribbon's "Run main" calls main()."""

import xlwings as xw

from xladdin.excel.macros import refresh


def main() -> None:
    refresh(xw.Book.caller())
