"""The block pool's invariants, whatever any model says: checked on the implementation's state
after every op (and on the model's in the tests)."""

from __future__ import annotations


def state_violations(size: int, ref: list[int], free: list[int], keys: list,
                     cache: dict[tuple[int, int], list[int]]) -> list[str]:
    """The pool's invariants, whatever the model says: the null block is never free, counted or
    cached; every other block is free exactly when it has no reference; the free queue holds
    each block once; the cache map and the blocks' own hashes agree both ways."""
    problems = []
    queued = set(free)
    if 0 in queued:
        problems.append("the null block (0) is on the free queue")
    if len(queued) != len(free):
        twice = sorted(b for b in queued if free.count(b) > 1)
        problems.append(f"blocks twice on the free queue: {twice[:6]}")
    outside = sorted(b for b in queued if not 0 <= b < size) if queued and \
        (min(queued) < 0 or max(queued) >= size) else []
    if outside:
        problems.append(f"blocks outside 0..{size - 1} on the free queue: {outside[:6]}")
    if min(ref[1:size], default=0) < 0:
        negative = [b for b in range(1, size) if ref[b] < 0]
        problems.append(f"negative reference counts: block {negative[0]} has {ref[negative[0]]}")
    # (free exactly when unreferenced: one pass to see it holds, the two lists where it does not)
    unreferenced = {b for b in range(1, size) if ref[b] == 0}
    if unreferenced != {b for b in queued if 0 < b < size}:
        lost = [b for b in range(1, size) if ref[b] == 0 and b not in queued]
        if lost:
            problems.append(f"{len(lost)} blocks with no reference are not on the free queue "
                            f"(lost), e.g. {lost[:6]}")
        held = [b for b in range(1, size) if ref[b] > 0 and b in queued]
        if held:
            problems.append(f"{len(held)} blocks with references are on the free queue, e.g. "
                            f"block {held[0]} with {ref[held[0]]}")
    # each block's entries: none, one (hash, group), or a list [primary, *extra]
    entries = [[] if key is None else key if isinstance(key, list) else [key] for key in keys]
    if entries[0]:
        problems.append(f"the null block (0) is cached under {entries[0][0]}")
    for key, blocks in cache.items():
        strays = [b for b in blocks if not 0 <= b < size or key not in entries[b]]
        if strays:
            own = keys[strays[0]] if 0 <= strays[0] < size else "?"
            problems.append(f"the cache maps hash {key[0]} (group {key[1]}) to block {strays[0]}, "
                            f"whose own hash is {own}")
            break
    unmapped = [(block, key) for block, held in enumerate(entries) for key in held
                if block not in cache.get(key, ())]
    if unmapped:
        block, key = unmapped[0]
        problems.append(f"block {block} has hash {key[0]} (group {key[1]}) but the cache does "
                        f"not map it there: it can never be found again")
    return problems
