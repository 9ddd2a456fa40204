"""Hypothesis strategies for the trace targets: a seeded trace generator fed by drawn bytes, so a
failing trace shrinks as its bytes do (toward zeros: the generators' simplest choices). Each
trace target offers its own as `kvfuzz.<target>_traces()` (`TraceTarget.strategy`)."""

from __future__ import annotations

from hypothesis import strategies as st


def traces(from_bytes, max_bytes: int = 4096) -> st.SearchStrategy:
    """Traces `from_bytes(data)` decodes from up to `max_bytes` drawn bytes."""
    # At least 256 bytes (some 30 ops' worth of choices): Hypothesis draws short byte strings
    # by default, and a trace whose bytes run out repeats its simplest op.
    return st.builds(from_bytes, st.binary(min_size=min(256, max_bytes), max_size=max_bytes))
