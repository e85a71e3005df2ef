"""The worksheet functions, neutral to the spreadsheet: shared by Excel, LibreOffice Calc and the cell service."""
