"""What sparse retention must keep in Mamba "align" mode (`align.py`'s reduced mode): the state a
resend of a prompt resumes from.

Under `prefix_cache_retention_interval=0` a Mamba group caches no state of a prompt but the
ones at its reachable boundaries. The scheduler relies on one of them: a resend of a finished
prompt (its last token recomputed for logits, so a hit of at most P - 1 tokens) resumes from
the replay boundary, `replay_boundaries(P, ...)` = (P - 1,) without EAGLE, aligned down to the
manager's hit alignment (the hash block in this profile): A = (P - 1) // h * h. The released
docstring of `MambaManager.reachable_block_mask` promises that "their boundary state is always
kept so sparse retention does not defeat reuse", and its block rule keeps the state block that
ends on or below A: block A // b - 1, the state after e = A // b * b tokens (vllm 0.33.0,
`single_type_kv_cache_manager.py`, facts only).

So, judged here: a step of a request that ends exactly at e > 0 (its state written to block
e // b - 1 of its Mamba table, a full block) must leave that block cached under the request's
hash of its first e tokens in the Mamba group (group 1). Without it a resend hits shorter (or
not at all) though nothing was evicted. Where the step could not have written that state (a
chunk that steps over e; vLLM's scheduler cuts chunks at those positions, kvfuzz's traces do
not) nothing is judged, and neither is whether the state stays cached later (evictions follow
the free queue, which the reduced mode does not model).

With EAGLE (`use_eagle`, its drop on) the release keeps two replay boundaries instead,
`replay_boundaries(P, B, use_eagle=True)`: (P - 1) // B * B - B and P // B * B - B, each at least
0 (B the scheduler block, the block here: the resend's hit and a longer sibling's, each a block
below where EAGLE's drop lands them), and the scheduler's last cacheable position moves with
them (`get_mamba_prefill_checkpoint_position(num_tokens, b, drop)`: num_tokens // b * b - b);
a step ending at either must leave that state cached (`replay_state_ends`).

Caught: vLLM's line 1601 (`boundary_tokens // alignment_tokens` as `%`: the state kept is at
another block, or none) and the catalogue's `mamba_align_replay_state_dropped`.
"""

from __future__ import annotations

from kvfuzz.fuzz.kvmanager import align_eagle
from kvfuzz.oracle.kvmanager import mamba_align

CUT = "sparse retention: a chunk cut at the last cacheable block"
WRITTEN = "sparse retention: a replay boundary's state written"


def judged(trace) -> bool:
    """Whether the rule applies: retention 0, no lookahead hashing (the boundary P - 1 may have
    no hash yet then; EAGLE's two boundaries are judged: `replay_state_ends`)."""
    return trace.retention == 0 and not trace.hash_lookahead


def chunk(trace, request, start: int, new: int) -> int:
    """A prefill chunk of `new` tokens from `start` as the reduced mode schedules it: cut as
    vLLM's scheduler cuts it (`scheduler_cut`) where the rule is judged, else as drawn; with
    k - 1 tokens held back, also at the prompt's tail boundary (`align_eagle.tail_cut`)."""
    new = align_eagle.tail_cut(trace, request, start, new)
    if not judged(trace):
        return new
    prefill_end = max(request.prompt, len(request.tokens) - 1)
    checkpoint = mamba_align.checkpoint_index(start, start + new, prefill_end, trace.block_size,
                                              trace.hash_size, trace.mamba_checkpoint,
                                              eagle=trace.eagle)
    return scheduler_cut(len(request.tokens), start, new, trace.block_size,
                         checkpoint is not None, trace.eagle)


def step_problem(trace, request, mamba_table: list, entries,
                 since: int = 0) -> tuple[bool, str | None]:
    """After a step of `request`: (whether it wrote its replay state, what is wrong or None).
    With k - 1 tokens held back (`align_eagle.held_back`) a state is cached by the step that
    finalizes it, where the table still holds it (`since`: the tokens before the step)."""
    if not judged(trace):
        return False, None
    size, hashed = trace.block_size, trace.hash_size
    ends = replay_state_ends(request.prompt, size, hashed, trace.eagle)
    if align_eagle.held_back(trace):
        end = align_eagle.finalized_end(trace, since, request.computed, ends)
        return end is not None, end and replay_state_problem(
            request.prompt, end, mamba_table, entries,
            request.hashes(hashed, trace.hash_lookahead), size, hashed, trace.eagle)
    return (request.computed in ends and request.computed > 0,
            replay_state_problem(request.prompt, request.computed, mamba_table, entries,
                                 request.hashes(hashed, trace.hash_lookahead), size, hashed,
                                 trace.eagle))


def replay_state_end(prompt: int, block_size: int, hash_size: int) -> int:
    """The tokens whose state sparse retention keeps for a resend of a `prompt`-token prompt:
    the replay boundary P - 1 aligned down to the hash block, then to the Mamba block."""
    aligned = (prompt - 1) // hash_size * hash_size
    return aligned // block_size * block_size


def replay_state_ends(prompt: int, block_size: int, hash_size: int,
                      eagle: bool = False) -> tuple[int, ...]:
    """The tokens whose states sparse retention keeps for a replay of a `prompt`-token prompt:
    `replay_state_end`'s one, or with EAGLE `replay_boundaries`' two (the resend's and a longer
    sibling's, each a scheduler block below its aligned end; already on the block grid)."""
    if not eagle:
        return (replay_state_end(prompt, block_size, hash_size),)
    resend, extension = (prompt - 1) // block_size * block_size, prompt // block_size * block_size
    return tuple(sorted({max(resend - block_size, 0), max(extension - block_size, 0)}))


def replay_state_problem(prompt: int, computed: int, mamba_table: list, entries,
                         hashes: list[int], block_size: int, hash_size: int,
                         eagle: bool = False) -> str | None:
    """Why the Mamba state a step just wrote breaks the rule above, or None (`computed`: the
    request's tokens after the step; `mamba_table`: its Mamba table after it, without scratch
    blocks; `entries(block)`: that block's cache entries (hash, group); `hashes`: the request's
    hash per `hash_size` tokens)."""
    ends = replay_state_ends(prompt, block_size, hash_size, eagle)
    end = computed
    if end <= 0 or computed not in ends or len(mamba_table) < end // block_size:
        return None
    block = mamba_table[end // block_size - 1]
    key = (hashes[end // hash_size - 1], 1)
    if block and key in entries(block):
        return None
    where = (f"one of EAGLE's replay boundaries {list(ends)}" if eagle else
             f"replay boundary (tokens {prompt - 1} aligned to {hash_size}, then to blocks of "
             f"{block_size})")
    return (f"a step to {computed} tokens of a {prompt}-token prompt wrote the state at its "
            f"{where}, block {block}, and sparse retention (interval 0) did not cache it "
            f"under the request's hash of {end} tokens: a resend would not resume there")


def scheduler_cut(num_tokens: int, start: int, new: int, block_size: int,
                  checkpoint: bool, eagle: bool = False) -> int:
    """A prefill chunk of `new` tokens from `start` cut where vLLM's scheduler cuts it in align
    mode (`Scheduler._mamba_block_aligned_split`: "never run past the last cacheable block
    boundary mid-chunk", (num_tokens - 1) // b * b, unless the chunk exports its state through
    a prefill checkpoint block, `checkpoint`). For a new request that boundary is the replay
    state's end above, so the state a resend resumes from is written. The scheduler's other
    cuts (block-aligned chunk ends, the partial tail's boundary, shared-prefix junctions) are
    not modelled: the manager accepts any chunk, and no check depends on them. With EAGLE
    (`eagle`) the boundary backs off one block: max(num_tokens // b * b - b, 0), the higher of
    its replay states (`replay_state_ends`)."""
    last = max(num_tokens // block_size * block_size - block_size, 0) if eagle else \
        (num_tokens - 1) // block_size * block_size
    return last - start if not checkpoint and start < last < start + new else new
