"""Reference model of vLLM's `KVCacheManager` (vllm 0.33.0) with prefix caching, over one
full-attention group (group 0) and optionally a second one (group 1): a sliding window (of the
same block size, or another: then hits and caching follow the scheduler block, `hybrid.py`), a
chunked-local group or a Mamba group with caching off, on the block-pool model
(`oracle.blockpool`). The contract, read from the released
source (`kv_cache_manager.py`, `kv_cache_coordinator.py`, `single_type_kv_cache_manager.py`):

- `get_computed_blocks(request)`: the hit is capped at num_tokens - 1 tokens (the last token is
  always computed) and block-aligned. Full attention: the longest run of cached blocks from
  the first. Sliding window: within the full-attention hit, the rightmost run of
  cdiv(window - 1, block_size) cached blocks, the blocks before it null; without such a run,
  the run from block 0. Both groups: the full-attention blocks are cut to the sliding-window
  length, and the third value is the full-attention length when that is longer (else 0).
  Of several blocks cached under one hash, the earliest cached one.
- `allocate_slots(request, n, hit_tokens, hit_blocks)`: first the sliding-window blocks that
  left the window are freed (replaced by the null block, latest first), then the count: per
  group, the blocks the request needs for its computed + n tokens beyond what it holds (an
  admission: beyond max(its skipped blocks, hit + held)), plus the hit blocks that are free
  now (touching them takes them off the free queue). More than the free blocks: None, and
  nothing else changes. Else the hit is taken (touched; skipped blocks as null), new blocks
  come off the free queue, group 0 first, and the full blocks up to min(computed + n,
  num_tokens) are cached. The result: each group's new blocks.
- The scheduler's watermark: an admission (of a waiting or preempted request) while other
  requests run also needs int(watermark * blocks) blocks left free beyond its count.
- `free(request)`: per group in order, the table without its leading null blocks, last block
  first, so that the tail is evicted first.
- A running request is one with a cached-block count (set by an admission); only its count
  formula differs.

The configurations beyond that (`Trace`'s settings): without prefix caching nothing is looked
up or cached; a request that skips reading the cache hits nothing; with EAGLE a hit drops its last
block (beside a sliding window each group first looks one of its blocks further, and a step caches
that block: `hybrid.py`); lookahead (draft) tokens get slots on every allocation, but
only the tokens a request has are cached; the sliding window keeps `retained` tokens more
behind it (extra_retained_tokens: fewer skipped, a larger admission cap); with asynchronous
scheduling the window moves on the tokens processed, the computed ones less those in flight.
A Mamba group in mode "none" or "all" with speculative blocks (`MambaSpec.num_speculative_blocks`,
multi-token prediction's scratch states) counts and takes, on every allocation and in the
whole-request check, `block_size * num_speculative_blocks` tokens more than the others (past the
draft slots and past `max_model_len`: `MambaManager.get_num_blocks_to_allocate` and
`allocate_new_blocks`, single_type_kv_cache_manager.py 1713-1730 and 1800-1808); they are
freed like its other blocks, as skipped once the computed tokens pass them.
`allocate_slots` of no new tokens adopts a hit alone (refused before vLLM 0.30:
`adopts_hit_alone`); with no hit either it is a caller's bug,
refused (`NothingToAllocate`, vLLM's ValueError) before anything changes. KV events: the
pool's (`oracle.blockpool.events`), a hit reported per group for a request that asks (the first
n blocks, from block 0), each `Stored` annotated with its group's kind and window.
`estimate_cached_tokens`: over the groups, the least of the longest prefix any of the request's
blocks covers; `get_block_ids_for_computed_tokens(n)`: each table's first cdiv(n, block_size).
The frees, the events, the stats and the reads: `model_frees.py`.
"""

from __future__ import annotations

import math

from kvfuzz.oracle.blockpool.model import BlockPoolModel
from kvfuzz.oracle.kvmanager.connector import ConnectorRules
from kvfuzz.oracle.kvmanager.extra_keys import prompt
from kvfuzz.oracle.kvmanager.hybrid import HybridRules, cdiv
from kvfuzz.oracle.kvmanager.model_frees import FreesAndReads
from kvfuzz.oracle.kvmanager.stats import PrefixStats

# Edge classes of EAGLE with a draft model's group flagged apart (`is_eagle_group`): a hit
# where one group takes the drop and the other does not, and a step that caches the flagged
# group's peek block but not this group's.
# Multi-token prediction: a step whose re-prefillable tokens held a block back from caching.
MTP_HELD = "MTP: a block held back from caching, its tokens re-prefillable"
EAGLE_APART = ("EAGLE flagged apart: a hit, full attention drops, the window does not",
               "EAGLE flagged apart: a hit, the window drops, full attention does not",
               "EAGLE flagged apart: no peek block cached for the unflagged group")
# Edge classes of a Mamba group ("none" or "all") with speculative blocks: an allocation refused
# that would fit without them, and one whose Mamba blocks reach past max_model_len's.
MAMBA_SPECULATIVE = ("speculative Mamba blocks: a refusal they decide",
                     "speculative Mamba blocks: past max_model_len")


class NothingToAllocate(Exception):
    """allocate_slots of no new tokens and no hit to adopt: the caller's bug (vLLM raises)."""


class KVManagerModel(FreesAndReads, ConnectorRules, HybridRules):
    # vLLM 0.30 on adopt a hit with no new tokens; an earlier release refuses it as it refuses
    # no hit at all (the lock step sets this from what the class declares)
    adopts_hit_alone = True

    def __init__(self, blocks: int, block_size: int, window: int, max_model_len: int,
                 retention: int | None = None, max_in_flight_tokens: int | None = None,
                 watermark: float = 0.0, caching: bool = True, events: bool = False,
                 stats: bool = False, lookahead: int = 0, eagle: bool = False,
                 retained: int = 0, window_block_size: int = 0, hash_block_size: int = 0,
                 local_chunk: int = 0, mamba_mode: str = "", encoder_tokens: int = 0,
                 zeroing: bool = False, hash_lookahead: int = 0, eagle_groups=(),
                 prefill_lookahead: int = 0, lone: bool = False, first_window: int = 0,
                 full_last: bool = False, mamba_speculative: int = 0):
        # Group 1: a sliding window of `window` tokens, or chunked-local attention in chunks of
        # `local_chunk` tokens, or none. `lone`: the window is group 0, the only one (the unitary
        # coordinator over a model whose every layer is sliding window); `second` names the
        # window's (or other second) group either way. `first_window`: group 0 is a sliding
        # window of that many tokens too, in blocks of `block_size` (a model whose layers are
        # all sliding window, in two window sizes: the hybrid coordinator's multi-pass search).
        self.groups = (0, 1) if (window or local_chunk or mamba_mode or encoder_tokens) \
            and not lone else (0,)
        self.lone, self.second = lone, 0 if lone else 1
        # The order the manager's coordinator walks its groups in (its `kv_cache_groups`): it
        # allocates, frees and pops group after group in it, which decides the block ids. Group
        # 0 is full attention whatever the order; `full_last` (a model whose first layer is
        # Mamba or cross attention) walks the second group first.
        self.order = self.groups[::-1] if full_last else self.groups
        # Each sliding-window group's window, by group
        self.windows = {0: window} if lone else {1: window} if window else {}
        if first_window:
            self.windows[0] = first_window
        self.local, self.mamba = local_chunk, bool(mamba_mode)
        # A Mamba group's speculative blocks, counted here outside mode "align" only (that
        # mode is judged in the reduced checks: `fuzz/kvmanager/align.py`)
        self.speculative = mamba_speculative if mamba_mode in ("none", "all") else 0
        # Cross-attention (caching off): each admission's encoder tokens, a static allocation
        self.encoder = encoder_tokens
        # Each group's block size; hashes per `h` tokens; hits and caching aligned to the
        # scheduler block size (the least common multiple of the groups').
        self.sizes = (block_size, window_block_size or block_size)[:len(self.groups)]
        self.h, self.align = hash_block_size or block_size, math.lcm(*self.sizes)
        # Lookahead hashing: a request's hashes (the caller's) exist for a block once
        # `hash_lookahead` tokens follow it, so a lookup or a step's caching reaches no further;
        # its events carry those tokens.
        self.pool = BlockPoolModel(blocks, caching=caching, hash_block_size=self.h,
                                   events=events, lookahead=hash_lookahead)
        self.hash_lookahead = hash_lookahead
        self.bs, self.window, self.max_len = block_size, window, max_model_len
        self.retention, self.caching, self.eagle = retention, caching, eagle
        # The groups that take EAGLE's last-block drop: those flagged `is_eagle_group` (a draft
        # model's), or with none flagged every group (the coordinator's fallback); none
        # without `use_eagle` (the scheduler clears it under lookahead hashing)
        flagged = set(eagle_groups) or set(self.groups)
        self.dropping = tuple(eagle and group in flagged for group in self.groups)
        # Multi-token prediction: the last prefill_lookahead - 1 computed tokens may be
        # re-prefilled (the coordinator's num_reprefillable_tokens), not cached yet
        self.reprefillable = max(0, prefill_lookahead - 1)
        self.lookahead, self.retained = lookahead, retained
        self.stats = PrefixStats() if stats else None
        self.watermark_blocks = int(watermark * blocks)  # as KVCacheManager computes it
        in_flight = max_model_len if max_in_flight_tokens is None else max_in_flight_tokens
        # SlidingWindowSpec.max_admission_blocks_per_request: what the whole-request check
        # counts at most for the sliding-window group.
        self.admission_caps = {
            group: cdiv(min(tokens - 1 + retained + in_flight, max_model_len),
                        self.sizes[group]) + 1 for group, tokens in self.windows.items()}
        if local_chunk:  # ChunkedLocalAttentionSpec's: a chunk and the tokens in flight
            self.admission_caps[1] = cdiv(min(local_chunk + in_flight, max_model_len),
                                          self.sizes[-1])
        self.tables: list[dict[int, list[int]]] = [{} for _ in self.groups]
        self.num_cached: list[dict[int, int]] = [{} for _ in self.groups]
        # What the last allocate_slots did, for the lock step's checks and counts: the blocks its
        # window move put back free, what its check counted, whether the whole-request check
        # refused it.
        self.freed_by_window, self.predicted, self.refused_whole = 0, 0, False
        self.marks: list[str] = []  # edge classes the last calls reached (the lock step counts)
        # The new attention blocks recorded for zeroing, per group, until taken (mixed
        # precision: every group here is an attention group)
        self.zeroing = zeroing
        self.to_zero: list[list[int]] = [[] for _ in self.groups]
        # Deferred frees (`pop_blocks_for_free`): (rid, blocks) in the order they were popped,
        # each held until its `release` hands it back to the pool.
        self.deferred: list[tuple[int, list[int]]] = []
        # Each request's extra hash keys (LoRA, cache salt, images), which its KV events
        # publish (its hashes, computed by the caller, carry them already)
        self.request_keys: dict = {}

    def prompt(self, rid: int, hashes, tokens):
        """Request `rid` as the pool reads it for its KV events."""
        return prompt(hashes, tokens, self.request_keys.get(rid))

    def skipped_tokens(self, group: int, computed: int) -> int:
        if group in self.windows:
            return max(0, computed - self.windows[group] + 1 - self.retained)
        if group != self.second:  # full attention skips nothing
            return 0
        if self.local:  # the chunks before the one the next token is in
            return computed // self.local * self.local
        if self.mamba:  # every state but the last computed token's
            return max(0, computed - 1)
        return 0  # cross-attention frees nothing until the request goes

    def drops(self, group: int) -> bool:
        """Whether `group`'s manager takes EAGLE's drop (its `use_eagle`)."""
        return self.dropping[group]

    def take_marks(self) -> list[str]:
        marks, self.marks = self.marks, []
        return marks

    def running(self, rid: int) -> bool:
        return any(rid in counts for counts in self.num_cached)

    # get_computed_blocks

    def get_computed_blocks(self, hashes: list[int], num_tokens: int, tokens=(),
                            skip: bool = False, report: bool = False, keys=None, cap: int = -1):
        """The hit; `skip`: the request skips reading the cache; `report`: it asks its hit
        reported (KV events of the hit blocks of each group, with the request's extra `keys`);
        `cap`: the caller's `max_cache_hit_length` (at most num_tokens - 1; -1: none, the
        manager's num_tokens - 1), the hit searched up to it as up to num_tokens - 1."""
        found = self._hit(hashes, num_tokens, skip, cap)
        if 0 <= cap < num_tokens - 1:  # (the search only reads: its marks put back)
            marks = list(self.marks)
            if self._hit(hashes, num_tokens, skip)[1] > found[1]:
                marks.append("hit cut by the caller's cap")
            self.marks[:] = marks
        blocks, hit, _ = found
        if report and hit:
            for group, group_blocks in enumerate(blocks):
                if group_blocks:
                    self.pool.emit_cached_block_events(prompt(hashes, tokens, keys),
                                                       len(group_blocks), self.sizes[group],
                                                       group)
        return found

    def group_hashes(self, hashes: list[int], group: int) -> list[int]:
        """The hashes of a group's blocks: each block's last hash unit's."""
        scale = self.sizes[group] // self.h
        return hashes[scale - 1::scale]

    def _hit(self, hashes: list[int], num_tokens: int, skip: bool, cap: int = -1):
        bs, longest = self.bs, num_tokens - 1 if cap < 0 else min(cap, num_tokens - 1)
        if not self.caching or skip:
            return [[] for _ in self.groups], 0, 0
        if self.lone:  # the window's rule alone, looking no further than the cap (unitary)
            windowed = self._window_hit(self.group_hashes(hashes, 0), longest)
            return [windowed], len(windowed) * bs, 0
        if 0 in self.windows:  # two windows: the hybrid coordinator's multi-pass search
            return self._fixed_point_hit(hashes, longest)
        hybrid_eagle = self.drops(0) and len(self.groups) > 1
        # The hybrid coordinator's EAGLE margin: each group that drops looks one of its blocks
        # further, then drops one (the unitary coordinator looks no further).
        reach = longest + (bs if hybrid_eagle else 0)
        full = []
        for block_hash in self.group_hashes(hashes, 0)[:reach // bs]:
            found = self.pool.map.get((block_hash, 0))
            if not found:
                break
            full.append(found[0])
        if len(self.groups) == 1:
            full = full[:-1] if self.drops(0) else full  # EAGLE recomputes the last block
            return [full], len(full) * bs, 0
        # The hybrid coordinator: full attention's run (less EAGLE's block) cut to the
        # scheduler block size, the window's hit within it, full attention cut to that.
        run = max(0, len(full) * bs - (bs if hybrid_eagle else 0))
        full_length = run // self.align * self.align
        if full_length < run:
            self.marks.append("hit cut to the scheduler block size")
        window_reach = min(full_length + self.sizes[1], len(hashes) * self.h) \
            if self.drops(1) else full_length
        windowed = (self._local_hit if self.local else self._window_hit)(
            self.group_hashes(hashes, 1), window_reach)
        length = len(windowed) * self.sizes[1]
        if length and self.drops(0) != self.drops(1):  # a draft model's group flagged apart
            self.marks.append(EAGLE_APART[self.drops(1)])
        return [full[:cdiv(length, bs)], windowed], length, \
            full_length if full_length > length else 0

    # allocate_slots

    def tokens_for(self, group: int, need: int, admission: bool) -> int:
        """The tokens `group` holds slots for: a cross-attention group the encoder's, passed at
        an admission alone (the scheduler's `num_encoder_tokens`), else `need`."""
        if group and self.encoder:
            return self.encoder if admission else 0
        if group == self.second and self.speculative:  # (a Mamba group: its scratch states)
            return need + self.sizes[group] * self.speculative
        return need

    def blocks_to_allocate(self, rid: int, need: int, hit: list[list[int]],
                           computed: int, capped: bool = False, admission: bool = False) -> int:
        total = 0
        for group in self.groups:
            size = self.sizes[group]
            required = cdiv(self.tokens_for(group, need, admission), size)
            # Mamba's and cross-attention's specs set no cap
            if capped and group in self.admission_caps:  # (Mamba's, cross-attention's: none)
                required = min(required, self.admission_caps[group])
            held = len(self.tables[group].get(rid, ()))
            if rid in self.num_cached[group]:
                total += max(required - held, 0)
                continue
            skipped = self.skipped_tokens(group, computed) // size
            total += max(required - max(skipped, len(hit[group]) + held), 0)
            pending = hit[group][max(0, skipped - held):]
            total += sum(1 for b in pending if b and self.pool.ref[b] == 0)
        return total

    def allocate_slots(self, rid: int, hashes: list[int], num_tokens: int,
                       num_computed: int, new: int, hit_tokens: int,
                       hit: list[list[int]] | None, whole: bool = False,
                       prompt_tokens: int = 0, shared_boundary: int = 0,
                       others_running: bool = False, tokens=(), in_flight: int = 0,
                       external: int = 0, delay: bool = False, reserve: int = 0,
                       zero_external: bool = True, waiting: bool | None = None,
                       lookahead: int | None = None):
        """None, or each group's new blocks; `hit` is None for a running request's call.
        `whole`: first check that the whole request fits (full_sequence_must_fit);
        `others_running`: an admission then leaves the watermark's blocks free;
        `prompt_tokens` and `shared_boundary` say which sliding-window blocks sparse retention
        keeps; `tokens`: the request's (KV events carry them); `in_flight`: its tokens
        scheduled but not processed yet. A KV connector's (`connector.py`): `external` tokens
        past the hit, with blocks of their own; `delay`: nothing cached (the load is
        asynchronous); `reserve`: blocks left free beyond the count; `zero_external`: whether
        the external tokens' blocks are recorded for zeroing (or the groups whose are);
        `waiting`: the request waits (the watermark holds; default: an admission); `lookahead`:
        the draft slots, where the scheduler asks other than the engine's (none for an
        asynchronous load)."""
        if new == 0 and external == 0 and (hit_tokens == 0 or not self.adopts_hit_alone):
            raise NothingToAllocate(f"r{rid}: no new tokens and no hit to adopt")
        hits = hit if hit is not None else [[] for _ in self.groups]
        computed = num_computed + hit_tokens + external
        total = min(computed, self.max_len)
        lookahead = self.lookahead if lookahead is None else lookahead
        need = min(total + new + lookahead, self.max_len)
        self.freed_by_window, self.refused_whole = 0, False
        # The watermark holds for waiting and preempted requests (an admission) while others run.
        waiting = hit is not None if waiting is None else waiting
        headroom = self.watermark_blocks if waiting and others_running else 0
        if whole:
            self.predicted = self.blocks_to_allocate(rid, min(num_tokens, self.max_len), hits,
                                                     computed, capped=True, admission=True)
            if self.predicted + headroom > self.pool.num_free():
                self.refused_whole = True
                self._mark_speculative_refusal(rid, min(num_tokens, self.max_len), hits,
                                               computed, headroom, 0, True, True)
                return None
        self.freed_by_window = self._free_out_of_window(rid, max(0, total - in_flight))
        self.predicted = self.blocks_to_allocate(rid, need, hits, computed,
                                                 admission=hit is not None)
        if self.predicted + headroom > self.pool.num_free() - reserve:
            self._mark_speculative_refusal(rid, need, hits, computed, headroom, reserve, False,
                                           hit is not None)
            return None
        if self.speculative and total + new + lookahead >= self.max_len:
            self.marks.append(MAMBA_SPECULATIVE[1])
        if hit is not None and not self.running(rid):
            for group in self.order:
                skipped = self.skipped_tokens(group, computed) // self.sizes[group]
                rest = hits[group][skipped:]
                self.pool.touch(rest)
                self.tables[group][rid] = [0] * skipped + list(rest)
                self.num_cached[group][rid] = skipped + len(rest)
            if external:
                self.allocate_external(rid, total, external, zero_external)
        fresh: list[list[int]] = [[] for _ in self.groups]  # by group, taken in the walk's order
        for group in self.order:
            table = self.tables[group].setdefault(rid, [])
            count = cdiv(self.tokens_for(group, need, hit is not None),
                         self.sizes[group]) - len(table)
            got = self.pool.get_new_blocks(count) if count > 0 else []
            table += got
            fresh[group] = got
            self.record_for_zeroing(group, got)
        if not delay:
            self.cache_blocks(rid, hashes, min(total + new, num_tokens), tokens, prompt_tokens,
                              shared_boundary)
        return fresh

    def _mark_speculative_refusal(self, rid: int, need: int, hits, computed: int,
                                  headroom: int, reserve: int, capped: bool,
                                  admission: bool) -> None:
        """Marks a refusal that the Mamba group's speculative blocks decide: the same count
        without them fits (only reads: the count touches nothing)."""
        if not self.speculative:
            return
        speculative, self.speculative = self.speculative, 0
        try:
            without = self.blocks_to_allocate(rid, need, hits, computed, capped=capped,
                                              admission=admission)
        finally:
            self.speculative = speculative
        if without + headroom <= self.pool.num_free() - reserve:
            self.marks.append(MAMBA_SPECULATIVE[0])

    def cache_blocks(self, rid: int, hashes: list[int], written: int, tokens=(),
                     prompt_tokens: int = 0, shared_boundary: int = 0) -> None:
        """What a step that has `written` tokens of the request caches (the manager's
        `cache_blocks`; `allocate_slots` calls it unless its load is pending)."""
        # What a step caches: its tokens, cut to the scheduler block size (the hybrid
        # coordinator's; a no-op where every group has one block size).
        for group in self.groups if self.caching else ():
            size = self.sizes[group]
            to_cache = self.cacheable(written, group)
            num_full = min(to_cache, len(hashes) * self.h) // size
            if self.hash_lookahead and to_cache // size > num_full:
                self.marks.append("lookahead hashing: a computed block waits for its next tokens")
            cached = self.num_cached[group].get(rid, 0)
            if cached < num_full:
                table = self.tables[group][rid]
                keep = self._reachable(cached, num_full, prompt_tokens, shared_boundary,
                                       group) if group in self.windows else None
                if keep is not None:  # sparse: only the blocks a hit can end on
                    table = [b if index in keep else 0 for index, b in enumerate(table)]
                    held = self.tables[group][rid][cached:num_full]
                    if self.retention is None and any(
                            b and not kept for b, kept in zip(held, table[cached:num_full])):
                        self.marks.append("dense window: blocks between hit points uncached")
                self.pool.cache_full_blocks(self.prompt(rid, hashes, tokens), table, cached,
                                            num_full, group, size)
                self.num_cached[group][rid] = num_full
            if group == 0 and 0 not in self.windows and size != self.h:
                self._cache_partial_tail(rid, hashes, tokens, prompt_tokens, to_cache)

    def cacheable(self, written: int, group: int) -> int:
        """What a step that has `written` tokens caches of `group` (`get_num_cacheable_tokens`):
        the unitary coordinator, the tokens less the re-prefillable ones (multi-token
        prediction); the hybrid one, cut to the scheduler block size, and for a group that takes
        EAGLE's drop one of its blocks past that (the peek a later hit takes and drops), both
        within the tokens less the re-prefillable ones (a group without the drop holds none
        back: the released rule)."""
        size, finalized = self.sizes[group], max(0, written - self.reprefillable)
        if len(self.groups) == 1:  # the unitary coordinator: the finalized tokens
            if finalized // size < written // size:
                self.marks.append(MTP_HELD)
            return finalized
        aligned = written // self.align * self.align
        if self.drops(group) and aligned:
            # (multi-token prediction: the peek within the finalized tokens)
            peek = min(finalized, finalized // self.align * self.align + size)
            if peek // size > aligned // size:
                self.marks.append("EAGLE: a block past the scheduler grid cached")
            if peek // size < min(written, aligned + size) // size:
                self.marks.append(MTP_HELD)
            return peek
        if any(self.dropping) and aligned and written > aligned:
            self.marks.append(EAGLE_APART[2])  # the flagged group's peek, not this group's
        return aligned
