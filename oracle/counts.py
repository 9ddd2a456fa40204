"""Counting helpers the judges of several targets share. Plain Python."""

from __future__ import annotations

from collections import Counter


def same_counts(a: Counter, b: Counter) -> bool:
    """`a == b` for Counters whose counts are all positive (what `Counter(iterable)`, `update`
    with an iterable, Counter subtraction and unary plus make): plain dict equality, compared in
    C. Counter's own `==` also treats a zero count as absent, at the cost of a Python loop over
    both, and the judges compare whole-state Counters after every op."""
    return dict.__eq__(a, b)
