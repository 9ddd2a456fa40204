"""Reference model of a prefix cache with its allocator and requests, as SGLang's scheduler drives
them (sglang 0.5.23: `RadixCache` over `TokenToKVPoolAllocator` at page size 1,
`PagedTokenToKVPoolAllocator` above; the request's row as `req_to_token` holds it). Plain Python;
the tree itself is `tree.py`.

- The allocator's pages 1..size/page_size start free (page 0 is the padding page); a slot is
  `page * page_size + offset`, and freeing any slot of a page frees the page.
- A request's row holds a slot per token it has; [0, protected) are the tree's (matched or
  inserted, locked through its node), [protected, filled) its own.
- Admission matches the prompt but for its last token (the scheduler's limit) and locks the node
  it ends at; the row starts as the matched slots.
- `checkpoint(rid)` (SGLang 0.5.23's `RadixCache.checkpoint`): inserts the page-aligned tokens so
  far with the row's slots (inserted_len: what the request inserted before), and the prompt's
  pages again with priority + 1 when they end before the key (so that eviction can drop the
  output without the prompt); frees the row's slots of [protected, cached before) (the tree had
  them already); rewrites the row's [protected, key) with the tree's slots, found by matching
  the key again; moves the lock to the key's node; protected = the key's length.
- `checkpoint(rid, finishing=True)` under the contract before 0.5.22 (`contract.py`): the
  insert with a hit on every node, the prompt split only where the release has it, the
  duplicates freed, protected = the key's length; no second match, the row and the lock stay.
- `release(rid)`: the request's own slots freed, its lock dropped, its row gone.
- `reset()`: the tree emptied, every page free; requests still live keep a lock of the old tree,
  which is void: releasing it changes nothing (`release_stale`).
"""

from __future__ import annotations

from kvfuzz.oracle.radix.contract import CURRENT, Contract
from kvfuzz.oracle.radix.invariants import NodeView
from kvfuzz.oracle.radix.tree import Node, RadixTree

INT64_MAX = 2**63 - 1


class Request:
    def __init__(self, tokens, prompt: int, ns: int, priority: int):
        self.tokens, self.prompt, self.ns, self.priority = list(tokens), prompt, ns, priority
        self.row: list[int] = []
        self.protected = self.inserted = 0
        self.node: Node | None = None
        self.stale = False

    @property
    def filled(self) -> int:
        return len(self.row)


class RadixModel:
    TREE = RadixTree  # the tree's rules (the unified cache's clock: oracle/unified/tree.py)

    def __init__(self, page_size: int, size: int, policy: str, contract: Contract = CURRENT):
        self.page_size, self.size, self.contract = page_size, size, contract
        self.tree = self.TREE(page_size, contract.policy(policy))
        self.tree.counts_hits = contract.counts_hits  # (none kept: SGLang 0.5.11's unified)
        self.free = set(range(1, size // page_size + 1))
        self.requests: dict[int, Request] = {}

    # -- the allocator ----------------------------------------------------------------------
    def available_size(self) -> int:
        return len(self.free) * self.page_size

    def pages_of(self, slots) -> set[int]:
        return {slot // self.page_size for slot in slots}

    def free_slots(self, slots) -> None:
        self.free |= self.pages_of(slots)

    def take(self, slots) -> None:
        """The implementation's allocator handed these slots out (the judge checked them)."""
        self.free -= self.pages_of(slots)

    def new_pages(self, rid: int, count: int) -> int:
        filled, ps = self.requests[rid].filled, self.page_size
        return -(-(filled + count) // ps) - -(-filled // ps)

    def extend(self, rid: int, count: int) -> int | None:
        """How many slots the request's allocation gets (None: refused, nothing changes)."""
        return None if self.new_pages(rid, count) > len(self.free) else count

    def alloc_slots(self, count: int) -> int | None:
        return None if count // self.page_size > len(self.free) else count

    def grant(self, rid: int, slots) -> None:
        self.take(slots)
        self.requests[rid].row += list(slots)

    def held(self) -> set[int]:
        """Pages the live requests hold themselves (their rows past `protected`)."""
        return {slot // self.page_size for r in self.requests.values() if not r.stale
                for slot in r.row[r.protected:]}

    # -- the cache --------------------------------------------------------------------------
    def admit_match(self, rid: int, tokens, prompt: int, ns: int, priority: int) -> list:
        request = self.requests[rid] = Request(tokens, prompt, ns, priority)
        value, request.node = self.tree.match(ns, request.tokens[:prompt - 1])
        request.row, request.protected = list(value), len(value)
        return [len(value), value]

    def admit_lock(self, rid: int) -> int:
        return self.tree.lock(self.requests[rid].node)

    def evict(self, num_tokens: int) -> int:
        gone = self.tree.evict(num_tokens)
        for node in gone:
            self.free_slots(node.value)
        return sum(len(node.value) for node in gone)

    def checkpoint(self, rid: int, finishing: bool = False) -> int:
        r, tree, contract = self.requests[rid], self.tree, self.contract
        key = tree.aligned(r.tokens[:r.filled])[:self.key_limit(r)]
        values = r.row[:len(key)]
        counted = contract.finish_inserted_len(r.inserted) if finishing else \
            contract.chunk_inserted_len(r.inserted, len(key))
        cached, inserted = tree.insert(r.ns, key, values, r.priority, counted)
        r.inserted = max(r.inserted, len(key))
        prompt_key = tree.aligned(key[:r.prompt])
        if 0 < len(prompt_key) < len(key) and contract.splits_prompt(finishing):
            tree.insert(r.ns, prompt_key, values, min(r.priority + 1, INT64_MAX),
                        len(prompt_key))
        self.free_slots(r.row[r.protected:cached])
        if finishing and contract.legacy:  # cache_finished_req: no match, the lock stays
            r.protected = len(key)
            return r.protected
        path, node = self.key_node(r.ns, key, inserted)
        r.row[r.protected:len(key)] = path[r.protected:]
        r.protected = len(key)
        tree.unlock(r.node)
        tree.lock(node)
        r.node = node
        return r.protected

    def key_limit(self, request: Request) -> int | None:
        """How much of its page-aligned key a checkpoint caches (None: all of it); a pure-SWA
        cache's floor cuts it (`oracle/radix/window.py`)."""
        return None

    def key_node(self, ns: int, key, inserted):
        """(the slots of the path, the node) a checkpoint moves the lock to: RadixCache matches
        the key again after inserting it (a match: it stamps the access times)."""
        return self.tree.match(ns, key)

    def release(self, rid: int, checkpointed: bool = True) -> None:
        r = self.requests.pop(rid)
        self.free_slots(r.row[r.protected:])
        self.tree.unlock(r.node)

    def release_stale(self, rid: int) -> None:
        del self.requests[rid]

    def match(self, tokens, ns: int) -> list:
        value, _ = self.tree.match(ns, tokens)
        return [len(value), value]

    def touch(self, tokens, ns: int) -> None:
        self.tree.match(ns, tokens)

    def pin(self, tokens, ns: int) -> list[int]:
        """The lock counts along the matched path while it is locked, deepest first."""
        _, node = self.tree.match(ns, tokens)
        self.tree.lock(node)
        counts, walk = [], node
        while walk is not self.tree.root:
            counts.append(walk.lock)
            walk = walk.parent
        self.tree.unlock(node)
        return counts

    def insert(self, tokens, ns: int, priority: int, slots) -> int:
        cached, _ = self.tree.insert(ns, tokens, slots, priority)
        return cached

    def reset(self) -> None:
        self.tree.reset()
        self.free = set(range(1, self.size // self.page_size + 1))
        for request in self.requests.values():
            request.stale, request.row, request.protected = True, [], 0

    # -- views ------------------------------------------------------------------------------
    def views(self) -> list[NodeView]:
        """Every node as the judge reads an implementation's, parents first."""
        found = []
        for node, path in self.tree.walk():
            parent = (node.ns, path[:-len(node.key)]) if node.parent is not self.tree.root \
                else None
            found.append(NodeView((node.ns, path), parent, None, tuple(node.key), node.value,
                                  node.lock, node.hits, node.priority, node.access, node.created))
        return found
