"""Invariants of the hybrid SWA allocator under a scheduler, over plain values (the model's or an
implementation's state alike): the mapping pairs exactly the live tokens still inside their
window with distinct SWA slots at the same in-page offset. The per-pool partition (free, staged,
pending, held) is the paged allocator's (`oracle/allocator/invariants.py`)."""

from __future__ import annotations

from collections import Counter

from kvfuzz.oracle.allocator.invariants import ENGINE


def window(rows: dict[int, list[int]], evicted: dict[int, int]):
    """(rid, position, full slot) of every live token whose SWA slot must still be held (rid
    ENGINE: a live guard's engine, whose row is its full slots that keep a peer)."""
    for rid, row in rows.items():
        for position in range(evicted.get(rid, 0), len(row)):
            yield rid, position, row[position]


def swa_holders(mapping: dict[int, int], rows, evicted, page_size: int) -> dict[int, set[int]]:
    """SWA page -> rids whose in-window tokens map into it."""
    holders: dict[int, set[int]] = {}
    for rid, _, slot in window(rows, evicted):
        if mapping.get(slot):
            holders.setdefault(mapping[slot] // page_size, set()).add(rid)
    return holders


def mapping_violations(mapping: dict[int, int], rows, evicted, page_size: int) -> list[str]:
    problems = []
    in_window = {slot: (rid, position) for rid, position, slot in window(rows, evicted)}
    missing = [(rid, pos, slot) for slot, (rid, pos) in in_window.items() if not mapping.get(slot)]
    if missing:
        rid, pos, slot = missing[0]
        where = f"the engine's full slot {slot}" if rid == ENGINE else \
            f"r{rid} position {pos} (full slot {slot})"
        problems.append(f"{len(missing)} tokens inside their window have no SWA slot, e.g. "
                        f"{where}")
    stranded = sorted(slot for slot, peer in mapping.items() if peer and slot not in in_window)
    if stranded:
        problems.append(f"{len(stranded)} full slots keep an SWA slot though no live token in its "
                        f"window holds them, e.g. full slot {stranded[0]} -> SWA slot "
                        f"{mapping[stranded[0]]}")
    counts = Counter(peer for peer in mapping.values() if peer)
    shared = sorted(peer for peer, n in counts.items() if n > 1)
    if shared:
        problems.append(f"{len(shared)} SWA slots mapped from two full slots, e.g. SWA slot "
                        f"{shared[0]}")
    skewed = sorted(slot for slot, peer in mapping.items()
                    if peer > 0 and peer % page_size != slot % page_size)
    if skewed:
        problems.append(f"{len(skewed)} full slots mapped to an SWA slot at another in-page "
                        f"offset, e.g. {skewed[0]} -> {mapping[skewed[0]]}")
    if any(peer < 0 for peer in mapping.values()):
        slot = min(s for s, peer in mapping.items() if peer < 0)
        problems.append(f"full slot {slot} mapped to a negative SWA slot {mapping[slot]}")
    return problems


def freed_peer_violations(mapping: dict[int, int], full_free, full_staged,
                          page_size: int) -> list[str]:
    """A full slot back on the full pool's free list (or staged) keeps no SWA peer: a release
    unmaps first (upstream's `free_full` expects it), else the peer is reachable only through
    a slot the next allocation hands to someone else."""
    released = set(full_free) | set(full_staged)
    kept = sorted(slot for slot, peer in mapping.items() if peer and slot // page_size in released)
    if not kept:
        return []
    return [f"{len(kept)} full slots on the free list keep an SWA peer, e.g. full slot "
            f"{kept[0]} -> SWA slot {mapping[kept[0]]}"]
