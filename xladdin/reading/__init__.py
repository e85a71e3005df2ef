"""The inputs read: pool files, report files and their texts, the dates a table is read as of."""
