"""The KV-cache-manager model's frees and reads (`model.KVManagerModel` mixes them in): a
request's blocks freed (at once, latest first, or deferred past the pool and released later), a
window's skipped blocks freed before a connector reads the table, the prefix cache reset and
blocks evicted; the stats, the events each `Stored` annotated with its group's kind, and the
scheduler's reads of a request's blocks."""

from __future__ import annotations

from dataclasses import replace

from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.oracle.kvmanager.stats import PrefixStats
from kvfuzz.strategies.blockpool.events import Stored

KINDS = ("full_attention", "sliding_window")  # a Stored event's group kind, by group
LOCAL = "chunked_local_attention"  # group 1's kind where it is chunked-local


class FreesAndReads:
    """Mixed into `KVManagerModel` (its tables, pool, groups, stats and deferred frees)."""

    # free, reset, evict

    def free(self, rid: int) -> None:
        for group in self.order:
            table = self.tables[group].pop(rid, [])
            self.num_cached[group].pop(rid, None)
            lead = next((i for i, b in enumerate(table) if b), len(table))
            self.pool.free_blocks(table[lead:][::-1])

    def remove_skipped_blocks(self, rid: int, processed: int) -> None:
        """The scheduler's own call before a connector reads a finishing request's table: the
        second group's blocks that `processed` tokens skip freed, as an allocation's window
        move frees them (`_free_out_of_window`)."""
        self._free_out_of_window(rid, processed)

    def _free_out_of_window(self, rid: int, computed: int) -> int:
        """The blocks each group's window (or chunk, or state) left freed, latest first, group
        after group (the coordinator's `remove_skipped_blocks`); full attention skips none."""
        before = self.pool.num_free()
        for group in self.order:
            table = self.tables[group].get(rid)
            count = min(self.skipped_tokens(group, computed) // self.sizes[group],
                        len(table or ()))
            freed = []
            for index in range(count - 1, -1, -1):
                if table[index] == 0:
                    break
                freed.append(table[index])
                table[index] = 0
            self.pool.free_blocks(freed)
        return self.pool.num_free() - before  # a block another request shares stays held

    def pop_blocks_for_free(self, rid: int) -> list[int]:
        """The request's tables emptied without a free: its blocks, group after group, each
        group's in table order past its leading null blocks (a window's skipped head). They stay
        held (the scheduler frees them later, `release`); a request with none defers nothing
        (the scheduler keeps only a non-empty list)."""
        blocks = []
        for group in self.order:
            table = self.tables[group].pop(rid, [])
            self.num_cached[group].pop(rid, None)
            lead = next((i for i, b in enumerate(table) if b), len(table))
            blocks += table[lead:]
        if blocks:
            self.deferred.append((rid, blocks))
        return blocks

    def release(self, rid: int) -> None:
        """The oldest deferred free of `rid` done: its blocks freed as one list, last popped
        first (one reversal over every group's blocks, not a reversal per group as `free`)."""
        index = next(i for i, (owner, _) in enumerate(self.deferred) if owner == rid)
        _, blocks = self.deferred.pop(index)
        self.pool.free_blocks(blocks[::-1])

    def deferring(self, rid: int) -> bool:
        return any(owner == rid for owner, _ in self.deferred)

    def reset_prefix_cache(self) -> bool:
        done = self.pool.reset_prefix_cache()
        if done and self.stats is not None:
            self.stats.reset = True
        return done

    def record_prefix_cache_stats(self, num_tokens: int, hits: int, preempted: bool,
                                  skip: bool = False) -> None:
        """At an admission (the scheduler's call): nothing without stats, without prefix
        caching or for a request that skips reading it."""
        if self.stats is not None and self.caching and not skip:
            self.stats.record(num_tokens, hits, preempted)

    def make_prefix_cache_stats(self):
        """The stats since the last call, as a tuple (None without stats), and new ones."""
        if self.stats is None:
            return None
        made, self.stats = self.stats.as_tuple(), PrefixStats()
        return made

    def take_events(self) -> list:
        """The pool's events since the last take, each `Stored` with its group's kind."""
        # (the second group's kind is KINDS[1], a lone window's group 0 included)
        return [replace(e, kind=LOCAL if e.group == self.second and self.local else
                        KINDS[e.group == self.second or e.group in self.windows],
                        window=self.windows.get(e.group) or None)
                if isinstance(e, Stored) and e.group in self.groups else e
                for e in self.pool.take_events()]

    def estimate_cached_tokens(self, rid: int) -> int:
        found = None
        for group in self.groups:
            longest = max((self.pool.tokens[b] or 0 for b in self.tables[group].get(rid, ())),
                          default=0)
            found = longest if found is None else min(found, longest)
        return found or 0

    def block_ids_for_computed_tokens(self, rid: int, computed: int) -> list[list[int]]:
        # A Mamba group's table is not clipped (not an attention spec), nor a cross-attention
        # group's (the encoder's tokens, not the request's)
        return [ids if group and (self.mamba or self.encoder) else ids[:cdiv(computed, size)]
                for group, (ids, size) in enumerate(zip(self.block_ids(rid), self.sizes))]

    def truncate(self, hit: list[list[int]], tokens: int) -> list[list[int]]:
        """`truncate_computed_blocks`: a lookup's blocks cut at an aligned token count."""
        return [list(blocks[:tokens // size]) for blocks, size in zip(hit, self.sizes)]

    def evict_blocks(self, block_ids) -> None:
        self.pool.evict_blocks(set(block_ids))

    def block_ids(self, rid: int) -> list[list[int]]:
        return [list(self.tables[group].get(rid, [])) for group in self.groups]
