"""A pool's whole state against the block-pool model's: free count and usage, the free queue
(order and links), reference counts, every block's entries and the tokens they cover, the
writable blocks, the hash map, the blocks a residency metrics collector tracks, and the
invariants (`state_violations`; with KV events, what a
consumer of them believes, `event_violations`). Both vLLM targets judge their pool with it:
`blockpool` the pool it drives, `kvmanager` the manager's.
"""

from __future__ import annotations

from operator import itemgetter

from kvfuzz.fuzz.engine.lockstep import crash_problems, guarded, list_diff, short
from kvfuzz.fuzz.engine.transcript import recording
from kvfuzz.oracle.blockpool.events import canonical, event_violations
from kvfuzz.oracle.blockpool.invariants import state_violations
from kvfuzz.oracle.blockpool.model import BlockPoolModel


def pool_problems(impl, model: BlockPoolModel, where: str, view=None,
                  writable: bool = True, lock=None) -> list[tuple[str, str]]:
    """What differs between a pool's state (read through `impl`, an `impl.blockpool.driver.
    PoolReader`) and the model's, and which invariants it breaks; `view`: what a consumer of
    the implementation's KV events holds (None: no events); `writable`: ask the pool which
    blocks are writable (one call per block: the manager's judge leaves it to the pool's).
    With `lock` (the lock step), the state is read in one call as what changed since the
    last read (`Lockstep.read_changed`: its raise is the lock step's to report)."""
    if lock is not None:
        parts = lock.read_changed("pool_state", writable, bool(model.metrics))
        if recording():  # the implementation's side: the judge compares, from its replay
            return []
        state = _parts(parts)
    else:
        state, raised = guarded(lambda: (impl.num_free(), *impl.free_queue(),
                                         impl.ref_counts(), impl.keys(), impl.cache_map(),
                                         impl.null_block(), impl.hash_tokens(), impl.usage(),
                                         impl.writable() if writable else None,
                                         impl.tracked() if model.metrics else None))
        if raised:
            return crash_problems(raised, where)
    num_free, queue, links, ref, keys, cache, null, tokens, usage, writable, tracked = state
    problems = []
    if model.metrics and tracked is None:
        problems.append(("residency metrics", "the pool has no metrics collector: it dropped "
                                              "the one it was given"))
    elif model.metrics and tracked != model.tracked:
        block = next(b for b in sorted(set(tracked) | set(model.tracked))
                     if tracked.get(b) != model.tracked.get(b))
        problems.append(("residency metrics", f"block {block}: expected "
                                              f"{_tracked(model.tracked.get(block))}, actual "
                                              f"{_tracked(tracked.get(block))}"))
    if null != 0:
        problems.append(("null block", f"expected block 0, actual block {null}"))
    if links:
        problems.append(("free queue links", links))
    if num_free != model.num_free():
        problems.append(("num free", f"expected {model.num_free()}, actual {num_free}"))
    if usage != model.get_usage():
        problems.append(("usage", f"get_usage(): expected {model.get_usage()!r}, actual "
                                  f"{usage!r} ({num_free} of {model.size - 1} blocks free)"))
    if queue != model.free:
        problems.append(("free queue", list_diff(model.free, queue)))
    if len(ref) != model.size or len(keys) != model.size or \
            (tokens is not None and len(tokens) != model.size):
        return problems + [("blocks", f"expected {model.size} blocks, actual {len(ref)}")]
    problems += _per_block(model, ref, keys, tokens, writable)
    if cache != model.map:
        key = next(k for k in sorted(set(cache) | set(model.map))
                   if cache.get(k) != model.map.get(k))
        problems.append(("hash map", f"{_key(key)}: expected blocks {model.map.get(key)}, "
                                     f"actual {cache.get(key)}"))
    found = _invariants(lock, model.size, ref, queue, keys, cache)
    if view is not None:
        found += event_violations(view, cache)
    return problems + [("invariant", text) for text in found]


def _invariants(lock, size: int, ref, queue, keys, cache) -> list[str]:
    """`state_violations` of the pool's state, unless the lock step (`lock`) saw the same state
    (==, part by part) hold them at its read before: they are a function of those four parts,
    == on them gives the same answers (ints and floats alike, a list never equal to a tuple),
    and many ops leave the pool as it was (a decode inside a block)."""
    state = (size, ref, queue, keys, cache)
    if lock is not None and lock.__dict__.get("_pool_held") == state:
        return []
    found = state_violations(size, ref, queue, keys, cache)
    if lock is not None:  # copies: a driver may hand out a list it changes later
        lock.__dict__["_pool_held"] = None if found else (
            size, list(ref), list(queue), list(keys), dict(cache))
    return found


# The parts of `PoolReader.pool_state`, in the order `pool_problems` unpacks them.
_PARTS = ("num_free", "queue", "links", "ref", "keys", "cache", "null", "tokens", "usage",
          "writable", "tracked")
_parts = itemgetter(*_PARTS)


def events_problems(method: str, expected: list, actual: list,
                    count) -> list[tuple[str, str]]:
    """The KV events a call published (runs of removals in any order: `canonical`)."""
    expected, actual = canonical(expected), canonical(actual)
    if expected:
        count("events published")
    if any(type(e).__name__ == "Removed" for e in expected):
        count("event: block removed")
    if expected == actual:
        return []
    at = next((i for i, (e, a) in enumerate(zip(expected, actual)) if e != a),
              min(len(expected), len(actual)))
    show = lambda events: short(events[at] if at < len(events) else "(none)", 300)  # noqa: E731
    return [("KV events", f"{method}: event {at} of {len(expected)} expected, {len(actual)} "
                          f"published: expected {show(expected)}, actual {show(actual)}")]


def _per_block(model: BlockPoolModel, ref, keys, tokens, writable) -> list[tuple[str, str]]:
    """Each block's reference count, entries and token count, and the writable blocks (each
    list compared whole first: a state read happens after every op)."""
    problems = []
    if ref != model.ref and ref[1:] != model.ref[1:]:  # (the null block's count aside)
        wrong = [b for b in range(1, model.size) if ref[b] != model.ref[b]]
        b = wrong[0]
        problems.append(("ref_cnt", f"block {b}: expected {model.ref[b]}, actual {ref[b]} "
                                    f"({len(wrong)} blocks differ)"))
    # (every block's entry is its primary one where no block holds more: most states)
    entries = [model.entries(b) for b in range(model.size)] if any(model.extra) else model.key
    if keys != entries:
        wrong = [b for b in range(model.size) if keys[b] != entries[b]]
        b = wrong[0]
        problems.append(("block hash", f"block {b}: expected {_key(entries[b])}, actual "
                                       f"{_key(keys[b])} ({len(wrong)} blocks differ)"))
    # a count of tokens, never 6.0 (which == 6); None: the release keeps no count (vLLM 0.20)
    if tokens is not None and (tokens != model.tokens or
                               not set(map(type, tokens)) <= _COUNTS):
        b = next(b for b in range(model.size) if tokens[b] != model.tokens[b] or
                 type(tokens[b]) not in (int, type(None)))
        problems.append(("block hash tokens", f"block {b}'s entry covers: expected "
                                              f"{model.tokens[b]} tokens, actual {tokens[b]!r}"))
    if writable is not None and writable != model.writable():
        problems.append(("writable blocks", f"is_block_writable: "
                                            f"{list_diff(model.writable(), writable)}"))
    return problems


_COUNTS = frozenset((int, type(None)))  # what a block's token count may be


def _tracked(accesses) -> str:
    return "not tracked" if accesses is None else f"tracked, {accesses} access(es) kept"


def _key(key) -> str:
    if key is None:
        return "no hash"
    if isinstance(key, list):
        return " and ".join(_key(k) for k in key)
    return f"hash {key[0]} group {key[1]}"
