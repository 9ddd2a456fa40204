"""Hypothesis strategies for the trace targets: the seeded trace generators fed by drawn bytes,
so a failing trace shrinks as its bytes do (toward zeros: the generators' simplest choices)."""

from __future__ import annotations

from hypothesis import strategies as st

from kvfuzz.strategies.allocator import generator as allocator_generator
from kvfuzz.strategies.compaction import generator as compaction_generator


def allocator_traces(max_bytes: int = 1024) -> st.SearchStrategy:
    """Allocator traces (`kvfuzz-allocator-trace/1`): request lifecycles, 1 to 200 ops."""
    return st.builds(allocator_generator.from_bytes, st.binary(max_size=max_bytes))


def compaction_traces(max_bytes: int = 1024) -> st.SearchStrategy:
    """Lazy-compaction traces (`kvfuzz-compaction-trace/1`), 1 to 300 ops."""
    return st.builds(compaction_generator.from_bytes, st.binary(max_size=max_bytes))
