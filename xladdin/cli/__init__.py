"""Command line: ``xladdin screen`` and ``xladdin cache``."""
