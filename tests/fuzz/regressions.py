"""Fuzzer programs that once failed, as (JSON line, target): checked on every run.

Add the JSON line a failure prints (tests/fuzz/check.py) with the target it failed on,
and a comment naming the bug.
"""
REGRESSIONS: list[tuple[str, str]] = [
]
