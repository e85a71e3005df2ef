"""The worksheet functions in LibreOffice Calc: a UNO Calc add-in (``.oxt``) built from this package
(``xladdin calc build``). Its component runs inside LibreOffice's Python, imports xladdin from the
environment it was built from, and calls the bodies Excel's functions call
(``xladdin.sheet.functions``) through one process-wide runtime; a waiting cell is a volatile result
that LibreOffice recalculates when its answers arrive (``runtime.py``)."""
