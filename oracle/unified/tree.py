"""Reference model of the tree of SGLang's `UnifiedRadixCache` with its full-attention component
(sglang 0.5.23, `mem_cache/unified_cache/unified_tree_core.py` and `components/full.py`): the
radix tree (`oracle.radix.tree`) where the unified core's contract is the same (page-aligned
keys, splits that keep hit counts, priorities and locks, hit counts past `inserted_len`, lock
counts, leaves evicted whole in policy order), with its own clock:

- Times are reads of a counter that every read advances, not of a monotonic clock: every node
  gets a time of its own.
- A match stamps nothing on its way down; when it ends, the node it ends at gets the next time
  and each node above it that time less 1e-5 per level (the deeper, the newer).
- An insert stamps the root, then each node it walks, each with the next time.
- A split's upper node is made with the next time but keeps the node's creation time (the two
  fragments are as old as the node was, so FIFO and FILO see the prefix as old as the suffix);
  the lower node then gets the next time (it was not accessed, but is placed beside the prefix).

Times are ticks of a logical clock, read where SGLang reads its counter, in the same order: only
their order between nodes is observable.
"""

from __future__ import annotations

from kvfuzz.oracle.radix.tree import Node, RadixTree

LEVEL = 1e-5  # what each level above a match's last node is older by


class UnifiedTree(RadixTree):
    def walked(self, node: Node, now: int, inserting: bool) -> None:
        if inserting:
            node.access = self.tick()

    def matched(self, node: Node) -> None:
        now, level = self.tick(), 0
        while node is not None:
            node.access = now - level * LEVEL
            node, level = node.parent, level + 1

    def split(self, child: Node, at: int) -> Node:
        upper = super().split(child, at)
        upper.created = child.created
        child.access = self.tick()
        return upper
