"""Shrinking a diverging compaction trace, and saving it to the corpus as content-named JSON.

    trace = shrink(trace, "compaction.lazy"); path = save_trace(trace, "corpus")
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from kvfuzz.fuzz.compaction_diff import Divergence
from kvfuzz.fuzz.compaction_i12 import replay
from kvfuzz.fuzz.corpus import DEFAULT_DIR, save_json
from kvfuzz.strategies.compaction.trace import Trace, to_json

Check = Callable[[Trace, str], Divergence | None]


def shrink(trace: Trace, impl_name: str, check: Check = replay, budget: int = 300) -> Trace:
    """A shorter trace that diverges the same way (same `Divergence.key()`): cut everything
    after the failing op, then delete ever smaller chunks of ops (ddmin-style), within `budget`
    re-runs. Returns `trace` itself if it does not diverge."""
    found = check(trace, impl_name)
    if found is None:
        return trace
    key = found.key()
    ops = _cut(list(trace.ops), found)
    chunk = max(1, len(ops) // 2)
    while budget > 0:
        start, removed = 0, False
        while start < len(ops) and budget > 0:
            candidate = ops[:start] + ops[start + chunk:]
            budget -= 1
            again = check(replace(trace, ops=tuple(candidate)), impl_name)
            if again is not None and again.key() == key:
                ops, removed = _cut(candidate, again), True
            else:
                start += chunk
        if chunk == 1 and not removed:
            break
        chunk = max(1, chunk // 2)
    note = f"shrunk from {len(trace.ops)} ops" + (f"; {trace.note}" if trace.note else "")
    return replace(trace, ops=tuple(ops), note=note)


def _cut(ops: list, found: Divergence) -> list:
    return ops if found.op_index is None else ops[:found.op_index + 1]


def save_trace(trace: Trace, directory: str | Path = DEFAULT_DIR) -> Path:
    """Write `compaction-<id>.json` atomically, named by content: parallel workers and repeated
    runs never clobber or duplicate a case."""
    return save_json(to_json(trace), f"compaction-{trace.trace_id()}.json", directory)
