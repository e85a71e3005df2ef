"""Excel front door: xlwings UDFs (``udfs``), the Refresh macro (``macros``),
cell value conversion (``cells``), pending-cell batching (``pending``) and the
only COM-specific code (``com``)."""
