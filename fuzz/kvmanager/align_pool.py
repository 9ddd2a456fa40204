"""The reduced mode's checks of the pool after every op (`align.py`, for a Mamba group in
"align" mode with prefix caching): the free count and usage against the free queue, no block
twice in one table, every block's reference count the number of live tables that hold it, the
states a request moved past back in the pool, each live request's Mamba table the states the
released rule keeps (`oracle/kvmanager/mamba_align.py`), what `evict_blocks` and a reset left
cached, and the pool's invariants. A mixin of `AlignLockstep`: it reads through the lock step
and keeps what the next op's checks compare against (`keys`, `ref`, `states`)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short
from kvfuzz.fuzz.kvmanager import align_order
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING
from kvfuzz.oracle.blockpool.invariants import state_violations
from kvfuzz.oracle.kvmanager import mamba_align


class AlignPoolChecks:
    def _pool_problems(self) -> list[tuple[str, str]]:
        size = self.trace.blocks
        num_free, (queue, links), ref, keys, cache, usage = (
            self.read("num_free"), self.read("free_queue"), self.read("ref_counts"),
            self.read("keys"), self.read("cache_map"), self.read("usage"))
        # entries by the trace's group ids, full attention 0 (`align_order.py`)
        ids = align_order.order(self.trace)
        keys, cache = align_order.keys(ids, keys), align_order.cache(ids, cache)
        held, states, now = [0] * size, {}, {}
        problems = [("free queue links", links)] if links else []
        self.mamba_tables = {}
        for rid, request in self.requests.items():
            tables = now[rid] = self.read("block_ids", rid)
            self.mamba_tables[rid] = self._states(tables[-1]) if tables else []
            self.mamba_rows[rid] = list(tables[-1]) if tables else []
            self.lengths[rid] = tuple(map(len, tables)) if len(tables) == 2 else None
            problems += self._kept_problems(rid, request, tables)
            states.update((b, rid) for b in tables[-1] if b)
            for group, table in enumerate(tables):
                blocks = [b for b in table if b]
                if len(set(blocks)) != len(blocks):
                    problems.append(("block table", f"r{rid}'s group {group} holds a block "
                                                    f"twice: {short(table)}"))
                for block in blocks:
                    held[block % size] += 1
        # a copy-on-write copy's endpoints keep a reference until the copy ran: the scheduler
        # frees them after its step's allocations (kvfuzz's driver at every op: none here)
        for block in self.read("copies_retained"):
            held[block % size] += 1
        for block in self.model.popped():  # a deferred free's, until released (align_deferred)
            held[block % size] += 1
        if num_free != len(queue) or usage != 1.0 - len(queue) / (size - 1):
            problems.append(("num free", f"{num_free} free, usage {usage!r}, {len(queue)} "
                                         f"blocks on the free queue of {size - 1}"))
        if len(ref) != size:
            return problems + [("blocks", f"expected {size} blocks, actual {len(ref)}")]
        # A state a request moved past (in a Mamba table at the last read, in none now) and
        # held by no other table must be back in the pool: the free side of the rule.
        kept = [(b, rid) for b, rid in self.states.items()
                if b not in states and ref[b % size] != held[b % size]]
        if kept:
            problems.append(("mamba states", "states that left their tables still referenced: "
                             + ", ".join(f"block {b} (r{rid}'s) has {ref[b % size]}, held "
                                         f"{held[b % size]} times" for b, rid in kept[:4])))
        self.states = states
        wrong = [b for b in range(1, size) if ref[b] != held[b]]
        if wrong:
            problems.append(("ref_cnt", "reference counts against the live tables: " + ", ".join(
                f"block {b} has {ref[b]}, held {held[b]} times" for b in wrong[:4])))
        cached = [b for b in self.evicted if keys[b] is not None]
        if cached:
            problems.append(("evict", f"evict_blocks left blocks {cached} cached"))
        if self.reset_done and (cache or any(k is not None for k in keys)):
            problems.append(("reset", f"a reset that succeeded left {len(cache)} keys cached"))
        problems += [("invariant", text) for text in state_violations(size, ref, queue, keys,
                                                                       cache)]
        problems += self.queue_problems(queue, ref, keys, now)  # (`align_queue.py`)
        self.ref, self.keys, self.evicted, self.reset_done = list(ref), list(keys), (), False
        self.cache = cache  # what the next admission's lookup finds (`_hit_problems`)
        return problems

    def _states(self, table: list) -> list:
        """A Mamba table without its speculative scratch blocks: its last block the state of
        the last computed token (what the boundary hand-offs name)."""
        return table[:len(table) - self.trace.mamba_speculative]

    def _kept_problems(self, rid, request, tables) -> list[tuple[str, str]]:
        """The Mamba group's table against the blocks its contract keeps
        (`oracle/kvmanager/mamba_align.py`): none while the request waits, else the state
        its last step read and the one it wrote."""
        if len(tables) != 2:
            return [("mamba states", f"r{rid}: expected two groups' tables, actual "
                                     f"{short(tables)}")]
        mamba = tables[1]
        if getattr(request, "finishing", False):  # (judged by its `remove_skipped`: flight_finish)
            return []
        if request.status != RUNNING:
            wrong = mamba and f"holds {short(mamba)} while it waits: expected nothing"
        else:
            # (after rejected drafts rolled back, the table is still its draft step's:
            # `align_drafts.py`)
            wrong = mamba_align.table_problems(mamba, self.read_from[rid],
                                               self.drafted_to.get(rid, request.computed),
                                               self.trace.block_size, self.checkpoints.get(rid),
                                               self.trace.mamba_speculative,
                                               self.flight_kept.get(rid, frozenset()))
        return [("mamba states", f"r{rid}'s Mamba table {wrong}")] if wrong else []
