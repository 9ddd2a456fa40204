"""The HiSparse reduced mode's checks on plain data (`hisparse.py`): an admission's block counts
as the released groups count them, a pool's invariants, a step's tables and result."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import crash_problems, short
from kvfuzz.oracle.blockpool.invariants import state_violations
from kvfuzz.oracle.kvmanager.hybrid import cdiv

SOURCE, INDEXER, RESIDENT, HOT = 0, 1, 2, 3  # the groups' positions (`hisparse_groups`)
HOT_BLOCKS = 2  # a hot region's blocks (`HiSparseHotSpec.blocks_per_request` there)


def admission_fits(tokens, cap, size, hit, source, indexer, host_ref, device_ref,
                   host=False) -> int:
    """The blocks a waiting request's admission of `tokens` slots after a hit of `hit` counts
    (the released `get_num_blocks_to_allocate` of each group): on the host (`host`) the
    source group's new blocks and its adopted hit blocks that are free; on the device the
    indexer's likewise, the resident pages' past the hit's host pages (at most `cap` when
    the whole request is checked), and the hot region when it resumes a host prefix."""
    needed, kept = cdiv(tokens, size), cdiv(hit, size)
    if host:
        return max(needed - kept, 0) + _free(source[:kept], host_ref)
    resident = max((needed if cap is None else min(needed, cap)) - kept, 0)
    return max(needed - len(indexer), 0) + _free(indexer, device_ref) + resident + \
        (HOT_BLOCKS if hit else 0)


def import_counts(tokens, end, size, source, indexer, host_ref, device_ref) -> tuple[int, int]:
    """(device, host) blocks an admission that imports external tokens up to `end` counts for
    `tokens` slots (the released `get_num_blocks_to_allocate` of each group, the request holding
    nothing yet): on the device the indexer's new blocks and its adopted hit blocks that are
    free, the resident group's last imported page plus its pages past the import (its import
    branch: no admission cap) and the hot region (an import reads host-backed history); on the
    host the source group's new blocks past its retained hit, cut to the import's pages (line
    497), and those of it that are free. A host count over the host pool's free blocks makes
    the source group answer the device pool's size plus one: refused."""
    needed, pages = cdiv(tokens, size), cdiv(end, size)
    kept = source[:pages]
    host = max(needed - len(kept), 0) + _free(kept, host_ref)
    device = max(needed - len(indexer), 0) + _free(indexer, device_ref) + \
        1 + max(needed - pages, 0) + HOT_BLOCKS
    return device, host


def _free(blocks, ref) -> int:
    """The blocks of `blocks` no table holds (evictable: an admission that adopts them takes
    them off the free queue, so they count)."""
    return sum(1 for b in blocks if 0 < b < len(ref) and ref[b] == 0)


def listed(entries) -> list:
    return entries if isinstance(entries, list) else [entries]


def pool_problems(name: str, pool: dict, size: int) -> list[tuple[str, str]]:
    problems = [(name, f"free queue links: {pool['links']}")] if pool["links"] else []
    if len(pool["ref"]) != size:
        return problems + [(name, f"expected {size} blocks, actual {len(pool['ref'])}")]
    if pool["num_free"] != len(pool["queue"]):
        problems.append((name, f"{pool['num_free']} free, {len(pool['queue'])} blocks on the "
                               f"free queue"))
    return problems + [(name, text) for text in state_violations(
        size, pool["ref"], pool["queue"], pool["keys"], pool["cache"])]


def slots(computed: int, lookahead: int, max_model_len: int) -> int:
    """The token slots a request's tables cover after a step that leaves it `computed` tokens:
    `allocate_slots`' `num_tokens_need_slot`, its tokens and the draft tokens' lookahead slots
    cut at the model's length (never below its tokens: those it holds already). The slots only
    grow while it runs (the lookahead is the engine's, the same at every step), so the last
    step's are the table's."""
    return max(computed, min(computed + lookahead, max_model_len))


def table_problems(rid, tables, computed, size, pages=0, groups=4,
                   covered=None) -> list[tuple[str, str]]:
    """After a success the source, indexer and resident tables hold cdiv(covered, b) blocks
    each, the slots of its `computed` tokens and its lookahead (`slots`; `covered` None: no
    lookahead), or `pages`, an import's, where that is more: a failed import's blocks stay.
    The lookahead slots take a block in each of the three alike (the released
    `allocate_new_blocks` of the source group, on the host, and of the indexer and the
    resident pages, on the device: the draft tokens' KV is written through the resident row,
    so a page missing there sends it to the null block); the resident table counts a hit's
    host pages as nulls (`add_local_computed_blocks`)."""
    covered = computed if covered is None else covered
    expected = max(cdiv(covered, size), pages)
    if len(tables) != groups or \
            any(len(tables[g]) != expected for g in (SOURCE, INDEXER, RESIDENT)):
        ahead = f" and {covered - computed} lookahead slots" if covered != computed else ""
        return [("block table", f"r{rid}: {computed} tokens computed{ahead} in blocks of "
                                f"{size}: expected {expected} source, indexer and resident "
                                f"blocks, actual {short(tables)}")]
    return []


def allocation_problems(expected, rejected, actual, raised, groups=4) -> list[tuple[str, str]]:
    if raised is not None:
        return crash_problems(raised)
    if actual is None:
        return []
    try:
        attention = [b for group in (actual[SOURCE], actual[INDEXER]) for b in group]
        fine = len(actual) == groups and 0 not in attention
    except (TypeError, IndexError):
        fine = False
    if not fine or len(set(actual[SOURCE])) != len(actual[SOURCE]) or \
            len(set(actual[INDEXER])) != len(actual[INDEXER]):
        return [("result", f"allocate_slots: expected {groups} groups' new blocks, the "
                           f"source's and indexer's distinct and not null, actual "
                           f"{short(actual)}")]
    return []


def reset_evict_problems(host, device, reset_done, evicted) -> list[tuple[str, str]]:
    """A reset that succeeded leaves nothing cached in either pool, an eviction none of the
    device blocks it named."""
    problems = []
    if reset_done:
        cached = [(name, b) for name, pool in (("host", host), ("device", device))
                  for b, key in enumerate(pool["keys"]) if key is not None]
        if cached:
            problems.append(("reset", f"a reset that succeeded left blocks cached: "
                                      f"{cached[:6]}"))
    cached = [b for b in evicted if b < len(device["keys"]) and
              device["keys"][b] is not None]
    if cached:
        problems.append(("evict", f"evict_blocks left device blocks {cached} cached"))
    return problems
