"""The local cell service (``xladdin cells serve``): the worksheet functions over HTTPS on 127.0.0.1 for
the Office add-in (Excel on Mac and the web) and WPS Spreadsheets, through the same ``CellRuntime``
as the Excel UDFs and Calc, declared from the one function table (``xladdin.sheet.functions``)."""
