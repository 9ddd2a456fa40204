"""The reduced mode of Mamba "align" (`align.py`) with full attention's group ordered last
(`Trace.full_last`, as vLLM 0.33.0 groups Qwen3-Next, whose layer 0 is linear attention): the
pool's reads name a group by the manager's id, Mamba's 0 and full attention's 1, while every
check of the reduced mode names them by the trace's, full attention 0 and Mamba 1 (the hit's
keys, `align_hits.py`; the lookups of each group, `oracle/kvmanager/align_hit.py`; the replay
state's key, `align_retention.py`; the boundary hand-offs' group, `boundary.MAMBA_GROUP`). So
each read that carries a group id is mapped here, once, as the lock step reads it: each block's
cache entries and the cache map (`align_pool.py`), the boundary offers drained every op and a
finished request's tail (`align.py`). The driver maps the answers per group (tables, a hit's
blocks, an allocation's) the same way (`impl/kvmanager/driver.py`, `_in_trace_order`).

The map is a relabelling only: a manager that caches or offers under the wrong group still
shows under a wrong id, and an entry that is not (hash, group) passes unchanged for the checks
to report. Forget one map and the release diverges (`tests/kvmanager/test_full_last.py`).
"""

from __future__ import annotations

SWAPPED = {0: 1, 1: 0}  # two groups, the manager's order the trace's reversed


def order(trace) -> dict | None:
    """The manager's group id -> the trace's, or None where they are the same."""
    return SWAPPED if trace.full_last else None


def _group(ids: dict, group):
    try:
        return ids.get(group, group)
    except TypeError:  # (unhashable: a malformed answer, reported by the check)
        return group


def _entry(ids: dict, entry):
    """A cache entry (hash, group) with the trace's group id."""
    try:
        digest, group = entry
    except (TypeError, ValueError):
        return entry
    return (digest, _group(ids, group))


def keys(ids: dict | None, keys):
    """Each block's entries (None, (hash, group), or a list of them: `PoolReader.keys`)."""
    if ids is None or not isinstance(keys, list):
        return keys
    return [None if entries is None else
            [_entry(ids, e) for e in entries] if isinstance(entries, list) else
            _entry(ids, entries) for entries in keys]


def cache(ids: dict | None, cache):
    """The cache map, (hash, group) -> blocks."""
    if ids is None or not isinstance(cache, dict):
        return cache
    return {_entry(ids, key): blocks for key, blocks in cache.items()}


def offloads(ids: dict | None, entries):
    """`take_boundary_state_offloads`' (rid, group, block, tokens) entries."""
    if ids is None or not isinstance(entries, list):
        return entries
    return [(e[0], _group(ids, e[1]), *e[2:]) if _sized(e, 4) else e for e in entries]


def tail(ids: dict | None, entries):
    """`finalize_partial_tail_offloads`' (group, block, tokens) entries."""
    if ids is None or not isinstance(entries, list):
        return entries
    return [(_group(ids, e[0]), *e[1:]) if _sized(e, 3) else e for e in entries]


def _sized(entry, size: int) -> bool:
    return isinstance(entry, (tuple, list)) and len(entry) == size
