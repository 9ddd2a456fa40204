"""Reference model of SGLang's prefix tree (`RadixCache`, sglang 0.5.23, `mem_cache/radix_cache.py`)
in plain Python: the contract a scheduler relies on, read from the released source.

- Keys are page-aligned: a key is cut down to whole pages before anything else (page size 1:
  unchanged); an empty key matches nothing and changes nothing.
- A node holds an edge of tokens (whole pages) and the slots of its KV (`value`, one per
  token). A parent keys each child by the child's namespace and its first page.
- `match(ns, tokens)`: the longest cached prefix, in whole pages: its slots and the node it ends
  at; a match that ends inside a node splits it there first. Every node walked (and the root)
  gets one new access time.
- `insert(ns, tokens, value)`: walks the cached prefix as a match does (splitting where the key
  leaves a node), then hangs the rest under the last node as a new leaf with value[prefix:].
  Returns the length already cached. Hit counts: every node walked past `inserted_len` (what
  this request inserted before) gains one, the new leaf starts at one when it ends past it.
  Priorities: every node walked, and the new leaf, get max(own, the insert's).
- A split makes a new upper node (fresh creation and access time) holding the first part; it
  takes the lower node's hit count, priority and lock count.
- `lock(node)` / `unlock(node)`: +1 / -1 on every node from `node` up to (not including) the
  root. Sizes: `evictable` sums the key lengths of unlocked nodes, `protected` of locked ones.
- `evict(n)`: leaves that are unlocked are taken in the policy's order (smallest key first; a
  parent left childless and unlocked joins them), each wholly, until at least n tokens went or
  none is left. The policies (`POLICIES`) are the seven `RadixCache` accepts; T-LRU reads fields
  only the unified cache's nodes have.

Times are ticks of a logical clock, one per time SGLang reads its monotonic clock, in the same
order: only their order between nodes is observable (`docs/upstream-sglang.md`).
"""

from __future__ import annotations

import heapq

SLRU_PROTECTED = 2  # SLRUStrategy's default protected_threshold
POLICIES = {
    "lru": lambda n: (n.access,),
    "lfu": lambda n: (n.hits, n.access),
    "fifo": lambda n: (n.created,),
    "mru": lambda n: (-n.access,),
    "filo": lambda n: (-n.created,),
    "priority": lambda n: (n.priority, n.access),
    "slru": lambda n: (int(n.hits >= SLRU_PROTECTED), n.access),
}


class Node:
    def __init__(self, ns: int, key: list[int], value: list[int], parent, now: int):
        self.ns, self.key, self.value, self.parent = ns, key, value, parent
        self.children: dict[tuple, Node] = {}
        self.lock = self.hits = self.priority = 0
        self.access = self.created = now

    def path(self) -> tuple[int, tuple[int, ...]]:
        """(namespace, every token from the root to this node's end): a node's name."""
        node, parts = self, []
        while node.parent is not None:
            parts.append(node.key)
            node = node.parent
        return self.ns, tuple(token for part in reversed(parts) for token in part)


class RadixTree:
    counts_hits = True  # whether an insert raises its nodes' hit counts (contract.py)

    def __init__(self, page_size: int, policy: str):
        self.page_size, self.order = page_size, POLICIES[policy]
        self.clock = 0
        self.reset()

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def reset(self) -> None:
        self.root = Node(0, [], [], None, self.tick())
        self.root.lock = 1  # the root is never evictable

    def edge(self, ns: int, tokens) -> tuple:
        return ns, tuple(tokens[:self.page_size])

    def aligned(self, tokens) -> list[int]:
        return list(tokens[:len(tokens) // self.page_size * self.page_size])

    def common(self, key, tokens) -> int:
        """Tokens shared by `key` and `tokens`, in whole pages."""
        n = 0
        while n < min(len(key), len(tokens)) and key[n] == tokens[n]:
            n += 1
        return n // self.page_size * self.page_size

    # -- the public calls -------------------------------------------------------------------
    def match(self, ns: int, tokens) -> tuple[list[int], Node]:
        key = self.aligned(tokens)
        if not key:
            return [], self.root
        now, node, value = self.tick(), self.root, []
        self.walked(node, now, inserting=False)
        while key and self.edge(ns, key) in node.children:
            child = node.children[self.edge(ns, key)]
            self.walked(child, now, inserting=False)
            shared = self.common(child.key, key)
            if shared < len(child.key):
                node = self.split(child, shared)
                value += node.value
                break
            value += child.value
            node, key = child, key[shared:]
        self.matched(node)
        return value, node

    def peek(self, ns: int, tokens) -> tuple[int, bool]:
        """What `match` would find, touching nothing: (tokens cached, whether it ends inside a
        node and so splits it)."""
        node, key, found = self.root, self.aligned(tokens), 0
        while key and self.edge(ns, key) in node.children:
            node = node.children[self.edge(ns, key)]
            shared = self.common(node.key, key)
            found, key = found + shared, key[shared:]
            if shared < len(node.key):
                return found, True
        return found, False

    def insert(self, ns: int, tokens, value, priority: int = 0,
               inserted_len: int = 0) -> tuple[int, Node]:
        key = self.aligned(tokens)
        value = list(value[:len(key)])
        now, node, done = self.tick(), self.root, 0
        self.walked(node, now, inserting=True)
        while key and self.edge(ns, key) in node.children:
            node = node.children[self.edge(ns, key)]
            self.walked(node, now, inserting=True)
            shared = self.common(node.key, key)
            done, key, value = done + shared, key[shared:], value[shared:]
            if shared < len(node.key):
                node = self.split(node, shared)
            node.priority = max(node.priority, priority)
            if done > inserted_len and self.counts_hits:
                node.hits += 1
        if key:
            leaf = Node(ns, key, value, node, self.tick())
            leaf.priority = priority
            leaf.hits = int(done + len(key) > inserted_len and self.counts_hits)
            node.children[self.edge(ns, key)] = leaf
            node = leaf
        return done, node

    # -- what a tree with another clock overrides (oracle/unified/tree.py) --------------------
    def walked(self, node: Node, now: int, inserting: bool) -> None:
        """A match or insert walks `node` (the root first): one access time for the whole walk,
        read once before it."""
        node.access = now

    def matched(self, node: Node) -> None:
        """A match ended at `node` (after any split)."""

    def split(self, child: Node, at: int) -> Node:
        parent = child.parent
        upper = Node(child.ns, child.key[:at], child.value[:at], parent, self.tick())
        upper.hits, upper.priority, upper.lock = child.hits, child.priority, child.lock
        parent.children[self.edge(child.ns, child.key)] = upper
        child.key, child.value, child.parent = child.key[at:], child.value[at:], upper
        upper.children = {self.edge(child.ns, child.key): child}
        return upper

    def lock(self, node: Node) -> int:
        """+1 along the path; the tokens that stopped being evictable, negated (SGLang's
        `IncLockRefResult.delta`)."""
        delta = 0
        while node is not self.root:
            delta -= len(node.key) if node.lock == 0 else 0
            node.lock += 1
            node = node.parent
        return delta

    def unlock(self, node: Node) -> int:
        delta = 0
        while node is not self.root:
            delta += len(node.key) if node.lock == 1 else 0
            node.lock -= 1
            node = node.parent
        return delta

    def evict(self, num_tokens: int) -> list[Node]:
        """The nodes evicted, in order (each detached from the tree)."""
        heap = [(self.order(n), n.access, n.created, id(n), n) for n in self.evictable_leaves()]
        heapq.heapify(heap)
        gone, freed = [], 0
        while freed < num_tokens and heap:
            node = heapq.heappop(heap)[-1]
            freed += len(node.value)
            del node.parent.children[self.edge(node.ns, node.key)]
            gone.append(node)
            parent = node.parent
            if not parent.children and parent.lock == 0:
                heapq.heappush(heap, (self.order(parent), parent.access, parent.created,
                                      id(parent), parent))
        return gone

    # -- what is in the tree ----------------------------------------------------------------
    def nodes(self) -> list[Node]:
        """Every node but the root, parents before children."""
        return [node for node, _ in self.walk()]

    def walk(self) -> list[tuple[Node, tuple[int, ...]]]:
        """(node, its tokens from the root) for every node but the root, parents first."""
        found, stack = [], [(child, ()) for child in self.root.children.values()]
        while stack:
            node, above = stack.pop()
            path = above + tuple(node.key)
            found.append((node, path))
            stack.extend((child, path) for child in node.children.values())
        return found

    def evictable_leaves(self) -> list[Node]:
        return [n for n in self.nodes() if n.lock == 0 and not n.children]

    def evictable_size(self) -> int:
        return sizes(self.nodes())[0]

    def protected_size(self) -> int:
        return sizes(self.nodes())[1]

    def path_value(self, node: Node) -> list[int]:
        parts = []
        while node is not self.root:
            parts.append(node.value)
            node = node.parent
        return [slot for part in reversed(parts) for slot in part]


def sizes(nodes) -> tuple[int, int]:
    """(evictable, protected): the tokens of the nodes with no lock and of those locked, over
    anything with a `key` and a `lock` (a node, or a judge's view of one): the one counting rule
    for the tree and for a judge that already holds the views."""
    evictable = protected = 0
    for node in nodes:
        if node.lock > 0:
            protected += len(node.key)
        elif node.lock == 0:
            evictable += len(node.key)
    return evictable, protected
