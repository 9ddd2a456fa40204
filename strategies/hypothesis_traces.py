"""Hypothesis strategies for the trace targets: the seeded trace generators fed by drawn bytes,
so a failing trace shrinks as its bytes do (toward zeros: the generators' simplest choices)."""

from __future__ import annotations

from hypothesis import strategies as st

from kvfuzz.strategies.allocator import generator as allocator_generator
from kvfuzz.strategies.blockpool import generator as blockpool_generator
from kvfuzz.strategies.kvmanager import generator as kvmanager_generator
from kvfuzz.strategies.compaction import generator as compaction_generator
from kvfuzz.strategies.mamba import generator as mamba_generator
from kvfuzz.strategies.swa import generator as swa_generator


def allocator_traces(max_bytes: int = 4096) -> st.SearchStrategy:
    """Allocator traces (`kvfuzz-allocator-trace/1`): request lifecycles, 1 to 200 ops."""
    return _traces(allocator_generator.from_bytes, max_bytes)


def compaction_traces(max_bytes: int = 4096) -> st.SearchStrategy:
    """Lazy-compaction traces (`kvfuzz-compaction-trace/1`), 1 to 300 ops."""
    return _traces(compaction_generator.from_bytes, max_bytes)


def mamba_traces(max_bytes: int = 4096) -> st.SearchStrategy:
    """Mamba slot-allocator traces (`kvfuzz-mamba-trace/1`), 1 to 200 ops."""
    return _traces(mamba_generator.from_bytes, max_bytes)


def swa_traces(max_bytes: int = 4096) -> st.SearchStrategy:
    """Hybrid full + sliding-window allocator traces (`kvfuzz-swa-trace/1`), 1 to 200 ops."""
    return _traces(swa_generator.from_bytes, max_bytes)


def blockpool_traces(max_bytes: int = 4096) -> st.SearchStrategy:
    """vLLM block-pool traces (`kvfuzz-blockpool-trace/1`): manager-like request lifecycles
    over a `BlockPool`, 1 to 200 ops."""
    return _traces(blockpool_generator.from_bytes, max_bytes)


def kvmanager_traces(max_bytes: int = 4096) -> st.SearchStrategy:
    """vLLM KV-cache-manager traces (`kvfuzz-kvmanager-trace/1`): request lifecycles with shared
    prefixes, chunked prefill, decode, preemption, 1 to 200 ops."""
    return _traces(kvmanager_generator.from_bytes, max_bytes)


def _traces(from_bytes, max_bytes: int) -> st.SearchStrategy:
    # At least 256 bytes (some 30 ops' worth of choices): Hypothesis draws short byte strings
    # by default, and a trace whose bytes run out repeats its simplest op.
    return st.builds(from_bytes, st.binary(min_size=min(256, max_bytes), max_size=max_bytes))
