"""Reference model of SGLang's `UnifiedRadixCache` with its full-attention component, its allocator
and requests, as the 0.5.23 scheduler drives them: the radix model (`oracle.radix.model`) where
the contract is the same (admission, allocation, `checkpoint` with the prompt's second insert at
priority + 1, release, a reset's void locks), with the unified tree's clock (`tree.py`) and
where the two caches' contracts differ:

- `insert` frees the caller's slots of what the tree already had, `[prev_prefix_len,
  cached)` of the value (`InsertParams.prev_prefix_len`, 0 for a load-back: all of the cached
  part), where `RadixCache.insert` leaves them to the caller. A checkpoint passes the request's
  protected length, so what it frees is what `RadixCache.checkpoint` frees itself.
- `checkpoint` moves the lock to the node its insert ended at and reads that path's slots;
  `RadixCache` matches the key again, which stamps the path's access times. Before 0.5.22
  (`oracle/radix/contract.py`) a chunk's `cache_unfinished_req` matches the key again too.
- `inc_lock_ref`'s delta counts the tokens that became protected, positive (`RadixCache`'s is
  negated); the pin probe reads it and the protected size while the lock is held (the Rust core
  exposes no per-node lock count).
"""

from __future__ import annotations

from kvfuzz.oracle.radix.model import RadixModel
from kvfuzz.oracle.unified.tree import UnifiedTree


class UnifiedModel(RadixModel):
    TREE = UnifiedTree

    def insert(self, tokens, ns: int, priority: int, slots) -> int:
        cached = super().insert(tokens, ns, priority, slots)
        self.free_slots(slots[:cached])
        return cached

    def key_node(self, ns: int, key, inserted):
        """A checkpoint takes the node its insert ended at (`InsertResult.last_device_node`) and
        reads that path's slots: no second match, no access times stamped. Before 0.5.22,
        `cache_unfinished_req` matched the key again (stamping the path); 0.5.22's checkpoint
        matches it again too, for the access times alone here (the lock stays on the insert's
        node, 0.5.23's contract: where an SWA window cuts the match above it, finding U)."""
        if self.contract.legacy:
            return super().key_node(ns, key, inserted)
        if self.contract.checkpoint_rematches:
            self.tree.match(ns, key)
        return self.tree.path_value(inserted), inserted

    def pin(self, tokens, ns: int) -> list[int]:
        """[tokens the lock made protected (None where `inc_lock_ref` answers no delta: SGLang
        0.5.11), the protected size while it is held]."""
        _, node = self.tree.match(ns, tokens)
        delta = -self.tree.lock(node)
        delta = delta if self.contract.lock_delta else None
        protected = self.tree.protected_size()
        self.tree.unlock(node)
        return [delta, protected]
