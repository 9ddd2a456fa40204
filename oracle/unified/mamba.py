"""What SGLang's `UnifiedRadixCache` promises with its Mamba component (sglang 0.5.23,
`mem_cache/unified_cache/components/mamba.py`), as plain-Python facts a judge sets against what
the implementation shows after each tree call (insert, match, eviction):

- A node holds one Mamba state slot or none. A state is the recurrent state after the node's
  last token, so only the node an insert ends at gets one (`commit_insert_component_data`); a
  split's upper node has none (`redistribute_on_node_split`), and no slot is in two nodes.
- A match ends at the deepest node on its full-attention hit that holds a state
  (`create_match_validator`): the scheduler resumes the recurrence from that state, and can
  from no other point. Where the full hit runs past it, `mamba_branching_seqlen` is the hit
  floored to the checkpoint grid (`lcm(mamba_cache_chunk_size, page_size)`), when that is
  still past the match, else None (`finalize_match_result_in_tree_core`); SGLang 0.5.11 names
  it wherever the full hit runs past the match and the floor is past 0 (`before_match`).
- An insert that ends at a node which already holds a state answers `mamba_exist` (the caller
  then frees its own slot, as `cleanup_after_caching_req` does), and the tree keeps its state.
- The state pool is conserved: free slots + states in the tree = the pool (slots 1..n; slot 0
  is the padded tokens' dummy), and `mamba_evictable_size() + mamba_protected_size()` is the
  number of states in the tree; a lock protects the state of the locked node alone, not of its
  path (`acquire_component_lock`: only the matched state is reused).

Standard library only; which state the Mamba LRU evicts first is judged by the Rust core
against the Python core.
"""

from __future__ import annotations

from math import lcm


def checkpoint_grid(chunk: int, page_size: int) -> int:
    """The depths a Mamba checkpoint can sit at (`mamba_checkpoint_grid`)."""
    return lcm(chunk, page_size)


def grid_problems(grid: int, page_size: int) -> list[tuple[str, str]]:
    """The grid the cache floors a branching point to (read from the release, since 0.5.11's
    chunk size is fixed whatever is asked) still has to be whole pages: a branching point off a
    page edge is a depth no node of the tree can end at."""
    if grid < 1 or grid % page_size:
        return [("mamba grid", f"the cache's checkpoint grid is {grid} tokens, not a whole "
                               f"number of {page_size}-token pages: a branching point on it "
                               f"can fall inside a page, where no node ends")]
    return []


def accepted_length(segments: list[tuple[int, bool]]) -> int:
    """What a match along `segments` ((tokens, holds a state) of each node its key reaches in
    full, root first) reports: the length up to the deepest node with a state, 0 for none."""
    best = total = 0
    for tokens, state in segments:
        total += tokens
        if state:
            best = total
    return best


def branching_seqlen(full_hit: int, matched: int, grid: int,
                     before_match: bool = False) -> int | None:
    """Where the request's recurrence must branch from the tree: the full-attention hit floored
    to the grid, where that lies past the match; `before_match` (SGLang 0.5.11,
    `BRANCHES_BEFORE_MATCH`): wherever the full hit runs past the match and the floor is past 0,
    at or before the match too (its scheduler skips such a point)."""
    aligned = full_hit // grid * grid
    if before_match:
        return aligned if full_hit > matched and aligned > 0 else None
    return aligned if aligned > matched else None


def pool_problems(states: list, free: list[int], capacity: int, available: int) -> list[str]:
    """The state pool against the tree's states (`states`: each node's slot or None)."""
    held = [slot for slot in states if slot is not None]
    problems = []
    twice = sorted({s for s in held if held.count(s) > 1})
    if twice:
        problems.append(f"Mamba slots {twice[:6]} in two nodes each")
    both = sorted(set(held) & set(free))
    if both:
        problems.append(f"Mamba slots {both[:6]} both in the tree and free")
    if len(set(free)) != len(free):
        problems.append(f"a Mamba slot free twice: {sorted(free)[:8]}")
    if available != len(free):
        problems.append(f"available_size() {available} vs {len(free)} free Mamba slots")
    off = len(free) + len(held) - capacity
    if off:
        problems.append(f"{len(free)} free + {len(held)} in the tree vs {capacity} Mamba slots: "
                        f"{abs(off)} {'counted twice' if off > 0 else 'lost'}")
    outside = sorted(s for s in set(held) | set(free) if not 1 <= s <= capacity)
    if outside:
        problems.append(f"Mamba slots {outside[:6]} outside the pool 1..{capacity}")
    return problems
