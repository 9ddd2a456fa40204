"""The HiSparse reduced mode's host copy-on-write (`hisparse.py`, the "hisparse cow" profile:
HiSparse's four groups beside a Mamba "align" group hashed per fewer tokens than a block, so
that a hit may end inside a source block).

What a scheduler and its worker rely on (vLLM 0.33.0: `SingleTypeKVCacheManager._apply_cow`,
`HiSparseCoordinator.take_host_block_copies` and `release_completed_host_copies`, the HiSparse
connector's `build_connector_meta` and `update_connector_output`):
- an admission whose hit ends inside a source block (a partial local hit) writes its own
  tokens into that block's page, which another request's table holds cached: the request gets
  a private block in its place, and the worker copies the shared page into it before the step
  writes it. So exactly one host copy comes with that step's command, from the hit's shared
  tail block (the source group's hit block at hit // b) to the block the request's table now
  holds there, one of the new blocks `allocate_slots` returned; and no copy with any other
  step;
- both ends stay allocated until the worker reports the copy run (a same-step free must not
  recycle them while the copy reads or writes them): each holds one reference more from the
  step's command until the report that names its destination
  (`completed_host_copy_dst_ids`), then exactly the tables' again. The worker runs a copy in
  the step that carries it and reports it with that step's output: here with the report that
  enqueues the step's write-backs (late as those are with `Trace.hisparse_lag`, drawn the same
  way per copy);
- the private page is the request's own: published only after its own write-back (the
  existing "published early" check: a block handed out afresh is not durable), and once
  written back published like any other page ("published late").

Beside them, the Mamba "align" group's part of the joined reduced checks: its hit cdiv(hit, b)
blocks, null but the last; after each success its table cdiv(computed, b) blocks, its last not
null; the rule of which Mamba states a table keeps (`oracle/kvmanager/mamba_align.py`: the
state its last step read, the one it wrote, a prefill checkpoint's and the speculative blocks,
nulls elsewhere); the state each step reads as the worker sees the table (`align_reads.py`);
its blocks counted in the
device pool's exact reference counts (with the device groups' own copy-on-write copies taken
and released every step, as the scheduler does); the hit's exact length over both pools'
entries (`hit_length_problems`); the admissions' counts with the Mamba group and the private
copies (`hisparse_admission.partial_and_mamba`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvfuzz.fuzz.engine.lockstep import Call, short
from kvfuzz.fuzz.kvmanager.hisparse_checks import INDEXER, SOURCE, listed
from kvfuzz.fuzz.kvmanager.lockstep import state_read
from kvfuzz.oracle.kvmanager import align_hit, mamba_align
from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.strategies.kvmanager.hisparse_lag import report_delays

MAMBA = 4  # the Mamba group's position, after HiSparse's four (`impl/kvmanager/driver.py`)
COPY_MADE = "host copy made (a partial local hit)"
COPY_LATE = "host copy released late"
COPY_FREED = "host copy in flight at its request's free"
PARTIAL_HIT = "partial hit inside a source block"
DEVICE_COPIES = "device copy-on-write copies taken"
EVENTS = (COPY_MADE, COPY_LATE, COPY_FREED, PARTIAL_HIT, DEVICE_COPIES)
# (the four groups alone with EAGLE, "hisparse": not one of this profile's events)
EAGLE_DROP = "HiSparse: a hit shortened by EAGLE's drop"


@dataclass
class HostCopy:
    rid: int
    source: int
    release_at: int  # the op (`op_number`) whose report names it run
    late: bool  # later than the report after its step


class HostCopies:
    """The host copies' side of `HiSparseLockstep` (a mixin before `LaggedReports`)."""

    def start_cow(self) -> None:
        self.host_copies: dict[int, HostCopy] = {}  # destination block -> the copy in flight
        self.copy_number = 0
        self.read_from: dict[int, int] = {}  # rid -> the computed tokens its last step read
        # what the "align" mode's checks share (`align.py`'s names): each request's Mamba table
        # after its last step, its last step's prefill checkpoint position; no connector loads
        self.mamba_rows: dict[int, list] = {}
        self.checkpoints: dict[int, int] = {}
        self.loaded_end: dict[int, int] = {}

    def take_host_copies(self, rid, hit, hit_source, tables, actual):
        """After a step's command: the host copies it carries, judged against the hit (`hit`
        None: not an admission)."""
        if not self.cow:
            return []
        got = yield Call("", "hisparse_copies", (), oracle=None, compare=state_read)
        copies = [tuple(pair) for pair in got.actual or ()]
        size, problems = self.trace.block_size, []
        partial = bool(hit) and hit % size != 0 and len(hit_source) > hit // size
        if partial:
            self.count(PARTIAL_HIT)
            index = hit // size
            expected = (hit_source[index], tables[SOURCE][index])
            if copies != [expected] or expected[1] not in actual[SOURCE]:
                problems.append(("host copy", (
                    f"r{rid}: a hit of {hit} tokens ends inside source block {index} "
                    f"({hit_source[index]}, shared): expected one host copy {expected} into "
                    f"a new block of its table {short(tables[SOURCE])} (new {short(actual[SOURCE])}"
                    f"), actual {copies}")))
        elif copies:
            problems.append(("host copy", f"r{rid}: a step with no partial hit in a source "
                                          f"block (hit {hit}) made host copies {copies}"))
        for source, destination in copies:
            self.copy_number += 1
            # released with the report that enqueues the step's write-backs (`report_delays`,
            # keyed apart from the transfer ids)
            enqueue, _ = report_delays(self.trace.hisparse_lag, -self.copy_number)
            self.host_copies[destination] = HostCopy(rid, source, self.op_number + 2 + enqueue,
                                                 enqueue > 0)
            self.count(COPY_MADE)
        return problems

    def _reports(self):
        """The worker's report: first the host copies it ran (`release_completed_host_copies`
        comes before `update_spills`), then the write-backs."""
        if self.cow:
            now = self.op_number + 1
            done = sorted(d for d, c in self.host_copies.items() if c.release_at <= now)
            if done:
                self.read("hisparse_copies_done", done)
                if any(self.host_copies[d].late for d in done):
                    self.count(COPY_LATE)
                for d in done:
                    del self.host_copies[d]
        return super()._reports()

    def freed_with_copies(self, rid: int) -> None:
        if self.cow and any(c.rid == rid for c in self.host_copies.values()):
            self.count(COPY_FREED)

    def expected_refs(self, held):
        """A copy's two ends each hold one reference more until it is reported run."""
        least, most = super().expected_refs(held)
        for destination, copy in self.host_copies.items():
            for block in (destination, copy.source):
                if 0 < block < len(least):
                    least[block] += 1
                    most[block] += 1
        return least, most

    # -- the Mamba group's part ---------------------------------------------------------------
    def mamba_step(self) -> None:
        """What the scheduler does every step: a new step starts, the device groups'
        copy-on-write copies are taken and their retained blocks freed; and the worker forgets
        the requests no longer running (`align_reads.leave_worker`)."""
        self.read("new_step_starts")
        if self.read("release_copies"):
            self.count(DEVICE_COPIES)
        self.leave_worker()

    def mamba_step_problems(self, rid, request, tables) -> list[tuple[str, str]]:
        """After a successful step of `rid` (its computed tokens counted): the prefill
        checkpoint block it takes, if any (`AlignLockstep._checkpoint`, the "align" mode's), the
        states its table keeps, then the state the worker reads and writes
        (`align_reads.read_step_problems`, the "align" mode's own check)."""
        self.mamba_rows[rid] = list(tables[MAMBA])
        self._checkpoint(rid, request)
        return self.mamba_table_problems(rid, tables, request.computed) or \
            self.read_step_problems(rid, request)

    def mamba_hit_problems(self, hit, blocks, request) -> list[tuple[str, str]]:
        """The Mamba group's hit: cdiv(hit, b) blocks, null but the last, which holds the state
        at the hit, cached under the request's hash of its first `hit` tokens."""
        mamba, hashed = blocks[MAMBA], self.trace.hash_size
        expected = cdiv(hit, self.trace.block_size)
        if len(mamba) != expected or (mamba and (0 in mamba[-1:] or any(mamba[:-1]))):
            return [("prefix hit", f"a hit of {hit} tokens: expected {expected} Mamba blocks, "
                                   f"null but the last, actual {short(mamba)}")]
        if hit:
            key = (mamba_align.hit_key(request.hashes(hashed), hit, hashed)[0], MAMBA)
            block = mamba[-1]
            entries = self.device_keys[block] if 0 < block < len(self.device_keys) else None
            if key not in listed(entries):
                return [("prefix hit", f"the Mamba group's block {block} is not cached under "
                                       f"the request's hash of its first {hit} tokens")]
        return []

    def hit_length_problems(self, request, hit: int) -> list[tuple[str, str]]:
        """The hit's length against what the pools held before the lookup: the hybrid
        coordinator's fixed point (`HybridKVCacheCoordinator.find_longest_cache_hit`) over the
        source group on the host pool's entries, the indexer on the device pool's (both full
        attention: looked up once, then trimmed; fine-grained, a partial entry inside the next
        block extends the run) and the Mamba group's latest cached state no deeper
        (`oracle/kvmanager/align_hit.py`'s lookups, each group's entries named as its own);
        at most `num_tokens - 1` or the caller's cap (`hisparse_cap.py`), nothing for a
        request that skips the cache."""
        if request.skip:  # (a hit was refused by the shape check)
            return []
        size, hashed, tokens = self.trace.block_size, self.trace.hash_size, len(request.tokens)
        units = request.hashes(hashed)
        source = entries_of(self.host_keys, SOURCE)
        indexer = entries_of(self.device_keys, INDEXER)
        # with EAGLE's drop (`use_eagle`, no group flagged apart: every group takes it; the
        # four groups alone, "hisparse"), each full-attention group is looked up one drop unit
        # past its cap and drops one (`align_hit.eagle_full_hit`): the source first, the
        # indexer within the source's hit, one pass (two attention groups, full attention
        # first: `is_simple_hybrid`)
        finder = align_hit.eagle_full_hit if self.trace.eagle else align_hit.full_attention_hit
        host = finder(units, self.lookup_limit(request), size, hashed, source)
        device = finder(units, host, size, hashed, indexer)
        if self.trace.eagle:  # (counted where the drop changes the hit)
            plain = align_hit.full_attention_hit(units, self.lookup_limit(request), size,
                                                 hashed, source)
            if align_hit.full_attention_hit(units, plain, size, hashed, indexer) != device:
                self.count(EAGLE_DROP)
        if not self.cow:
            expected = device
        else:
            mamba = {(h, align_hit.MAMBA) for h, _ in entries_of(self.device_keys, MAMBA)}
            expected = align_hit.mamba_hit(units, device, hashed, mamba)
        if hit == expected:
            return []
        drop = " after EAGLE's drop" if self.trace.eagle else ""
        mamba = f", the latest Mamba state cached at most that deep is at {expected}" \
            if self.cow else ""
        return [("prefix hit", f"expected {expected} tokens, actual {hit}: the source group's "
                               f"host entries cover {host}{drop} of the request's {tokens} "
                               f"tokens, the indexer's {device} of those (blocks of {size}, "
                               f"hashed per {hashed}, the last token never a hit){mamba}")]

    def mamba_stepped(self, rid: int, computed: int) -> None:
        """Before a step's tokens are counted: the state it reads is that of its `computed`-th
        token (the hit's, for an admission)."""
        self.read_from[rid] = computed

    def mamba_table_problems(self, rid, tables, computed) -> list[tuple[str, str]]:
        """The Mamba group's table against the states its contract keeps
        (`oracle/kvmanager/mamba_align.py`): the state its last step read (a partial hit's
        copy-on-write block in its place), the one it wrote, its prefill checkpoint's and the
        speculative scratch blocks past the state written, nulls elsewhere; cdiv(computed, b)
        + speculative long, the state written not null."""
        wrong = mamba_align.table_problems(tables[MAMBA], self.read_from.get(rid, 0), computed,
                                           self.trace.block_size, self.checkpoints.get(rid),
                                           self.trace.mamba_speculative)
        return [("mamba states", f"r{rid}'s Mamba table {short(tables[MAMBA])} {wrong}")] \
            if wrong else []


def entries_of(keys: list, group: int) -> set:
    """The (hash, full attention's id in `align_hit`) keys a pool's blocks are cached under in
    `group` (a block's entries: one key or a list of them)."""
    return {(entry[0], align_hit.FULL) for block in keys if block is not None
            for entry in listed(block) if entry[1] == group}
