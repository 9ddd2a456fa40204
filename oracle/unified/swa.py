"""What SGLang's `UnifiedRadixCache` promises with its SWA component (sglang 0.5.23,
`mem_cache/unified_cache/components/swa.py` and `mem_cache/common.py`), as plain-Python facts a
judge sets against what the implementation shows after each call:

- A node's SWA value is the SWA slots of its own full slots (the hybrid allocator's full-to-SWA
  mapping), or nothing: a tombstone, whose full slots stay cached.
- A match ends where the scheduler can attend a whole window: walking up from the match's end,
  the nodes with live SWA cover at least `window` tokens before the first tombstone, or the
  whole path is live (`create_match_validator`: a run of live nodes restarts at each tombstone).
- A checkpoint of a running request frees the SWA slots its window has left behind: with
  `pre_len` the insert key's length less one, nothing moves unless `pre_len - window` passes the
  request's cursor by one token; then the cursor rises to the protected length, and to
  `pre_len` less the window rounded up to whole pages (at least a page), page-floored
  (`free_swa_out_of_window_slots`, the prefix-sharing case, no Mamba retain floor); where the
  request's match named a branch, twice (`checkpoint_cursor`).
- The SWA pool is conserved like the full one: free + the tree's live SWA + what each live
  request holds past `max(protected, cursor)` is the capacity, no slot in two of them.

Standard library only; no model of which nodes are tombstoned or evicted first (SWA's own LRU
with window-bounded refresh): those are judged by the Rust core against the Python core.
"""

from __future__ import annotations


def page_ceil(n: int, page_size: int) -> int:
    return -(-n // page_size) * page_size


def out_of_window_cursor(pre_len: int, cursor: int, protected: int, window: int,
                         page_size: int, lifted: bool = False, margin: bool = False) -> int:
    """The request's SWA cursor after a checkpoint whose key is `pre_len + 1` tokens long
    (everything below it is freed SWA-side, or the tree's). `lifted`: SGLang 0.5.20's window
    free, which raises the cursor to the protected length first, moved or not (the same
    slots: the tree's; oracle/radix/contract.py, LIFTS_SWA_CURSOR). `margin`: 0.5.14's, which
    keeps a page past the window (SWA_PAGE_MARGIN)."""
    if pre_len - window < cursor + 1:  # SGLANG_SWA_EVICTION_INTERVAL is 1 at a checkpoint
        return max(cursor, protected) if lifted else cursor
    cursor = max(cursor, protected)
    threshold = pre_len - (window + page_size if margin else
                           page_ceil(max(window, page_size), page_size))
    moved = max(cursor, threshold) // page_size * page_size
    return max(moved, cursor)


def checkpoint_cursor(filled: int, branch: int | None, cursor: int, protected: int,
                      window: int, page_size: int, lifted: bool = False,
                      margin: bool = False, frees: bool = True) -> int:
    """The request's SWA cursor after `checkpoint(up_to=filled)`. Where its match named a branch
    (`swa_branching_seqlen`: the full-attention hit ran past the last live window) above the
    protected length, the checkpoint inserts up to the branch first, frees what that key's
    window left, then, the branch inserted and protected, frees again for the whole row
    (`SWAComponent.prepare_for_caching_req`, `cleanup_after_caching_req`). `frees` False: a
    checkpoint that frees nothing out of the window (before 0.5.18 by default,
    NO_CHECKPOINT_WINDOW_FREE): the cursor stays."""
    if not frees:
        return cursor
    if branch is None or not protected < branch <= filled:
        return out_of_window_cursor(filled - 1, cursor, protected, window, page_size, lifted,
                                    margin)
    cursor = out_of_window_cursor(branch - 1, cursor, protected, window, page_size, lifted,
                                  margin)
    return out_of_window_cursor(filled - 1, cursor, branch // page_size * page_size, window,
                                page_size, lifted, margin)


def window_covered(segments: list[tuple[int, bool]], window: int) -> bool:
    """Whether a match ending at the last of `segments` ((tokens, SWA live) of each node on its
    path, root first) is one the SWA component accepts."""
    if all(live for _, live in segments):
        return True
    run = 0
    for tokens, live in reversed(segments):
        if not live:
            return False
        run += tokens
        if run >= window:
            return True
    return True


def locked_window(segments: list[tuple[int, int | None, bool]], end: int, window: int) -> int:
    """The SWA slots a lock of the node a match ended at (`end` tokens) adds to the protected
    size: walking up from it, each node is locked until the nodes walked cover the window, the
    node that crosses it included (`acquire_component_lock`); a tombstone is locked too and
    protects nothing, and a node another lock holds already counts as protected. `segments`:
    (tokens, live SWA slots or None, locked already) of each node on the path, root first."""
    depth, above = 0, []
    for segment in segments:
        depth += segment[0]
        if depth > end:
            break
        above.append(segment)
    covered = protected = 0
    for tokens, live, locked in reversed(above):
        if covered >= window:
            break
        covered += tokens
        protected += 0 if locked else live or 0
    return protected


def accepted_length(segments: list[tuple[int, bool]], window: int) -> int:
    """What a match along `segments` (the nodes its tokens reach in full, root first) reports:
    the length up to the deepest node it may end at (`window_covered`), 0 for none."""
    best = total = 0
    for i, (tokens, _) in enumerate(segments):
        total += tokens
        if window_covered(segments[:i + 1], window):
            best = total
    return best
