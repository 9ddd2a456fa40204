"""What vLLM's `KVCacheManager` (vllm 0.33.0) does for a KV connector, mixed into the model
(`model.py`, whose tables, pool and groups it uses). Read from the released source
(`allocate_slots`, the coordinator's `allocate_new_computed_blocks`, the single-type managers'
`allocate_external_computed_blocks`, `allocate_new_blocks`, `record_blocks_for_zeroing`,
`take_new_block_ids`):

- External tokens (the connector's, past the local hit) count as computed: the hit is adopted
  first in every group (touched, its skipped blocks null), then each group gets blocks of its
  own for the rest of the computed tokens, cdiv(hit + external, block_size) less what it holds,
  unless the group's window skips every external token (`external_cover`); each group in its
  own block size where the sizes differ (the hit then on their least common multiple, the
  external tokens ending anywhere, inside a larger group's block too). They are not in
  `allocate_slots`' result (its new blocks are the slots past the computed tokens); the
  scheduler reads them from the request's table.
- `delay_cache_blocks` (an asynchronous load): nothing is cached by that call; the scheduler
  caches the request's computed tokens once the load is reported (`cache_blocks`).
- `reserved_blocks`: the allocation needs that many free blocks beyond its count.
- Zeroing (where `KVCacheConfig.needs_kv_cache_zeroing`: mixed precision, Mamba): every block
  an attention group takes (new slots, and external tokens' blocks unless the caller names the
  group as written by its load; a Mamba group's never, `zeroed`) is recorded, in order, per
  group; `record_blocks_for_zeroing` records a request's blocks from a token on again (null
  blocks too); `take_new_block_ids` hands the records over, group by group, and clears them.
"""

from __future__ import annotations

from kvfuzz.oracle.kvmanager.hybrid import cdiv


class ConnectorRules:
    def allocate_external(self, rid: int, total: int, external: int, zero) -> None:
        """Each group's blocks for the external tokens of an admission with `total` computed
        tokens (local hit and external), after every group adopted its hit; recorded for
        zeroing where `zero` is True, or for the groups it names (those the load does not
        write)."""
        for group in self.groups:
            covered = self.external_cover(group, total, external)
            if covered is None:
                self.marks.append("external tokens outside the window")
                continue
            table = self.tables[group][rid]
            count = covered - len(table)
            got = self.pool.get_new_blocks(count) if count > 0 else []
            table += got
            if zero is True or (zero is not False and group in zero):
                self.record_for_zeroing(group, got)

    def external_cover(self, group: int, total: int, external: int) -> int | None:
        """How many blocks `group`'s table holds once an admission's `external` tokens (of
        `total` computed, the local hit aligned to the scheduler block before them) have
        theirs: cdiv(total, the group's own block size), whatever the other groups' sizes
        (a group of smaller blocks than the scheduler block stops at the external tokens'
        end, not at the grid's); None where the group's window skips every external token
        (the table keeps what the hit and the skipped blocks gave it)."""
        skipped = self.skipped_tokens(group, total)
        kept = min(total - skipped, external) if skipped else external
        return cdiv(total, self.sizes[group]) if kept > 0 else None

    def record_for_zeroing(self, group: int, blocks: list[int]) -> None:
        if self.zeroing and self.zeroed(group):
            self.to_zero[group] += blocks

    def zeroed(self, group: int) -> bool:
        """Whether `group`'s new blocks are recorded: an attention group's alone (the single-type
        manager's `_record_new_block_ids` asks for an `AttentionSpec`), so never a Mamba
        group's, whose layers turn zeroing on all the same (`needs_kv_cache_zeroing`)."""
        return not (self.mamba and group == self.second)

    def record_blocks_for_zeroing(self, rid: int, start: int) -> None:
        """The request's blocks from token `start` on (block-aligned), recorded again."""
        if not self.zeroing:
            return
        for group in filter(self.zeroed, self.groups):
            self.to_zero[group] += self.tables[group].get(rid, [])[start // self.sizes[group]:]

    def new_block_ids(self) -> list[int]:
        """The records not yet taken, group after group (read, not emptied)."""
        return [block for records in self.to_zero for block in records]

    def take_new_block_ids(self) -> list[int]:
        taken = self.new_block_ids()
        self.to_zero = [[] for _ in self.groups]
        return taken
