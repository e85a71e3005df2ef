"""Excel front door: xlwings UDFs (``udfs``), the Refresh macro (``macros``) and the
only COM-specific code (``com``); cell value conversion and pending-cell batching are
the spreadsheet-neutral ``xladdin.sheet``'s."""
