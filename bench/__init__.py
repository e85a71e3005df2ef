"""Benchmarks: ``python -m bench`` (see docs/BENCHMARKS.md)."""
