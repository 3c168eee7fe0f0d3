"""Benchmarks: scripts that start a private PromptManager stack, measure, print and clean up.

Run one with ``.venv/bin/python bench/<name>.py``, or all with ``make bench``.
"""
