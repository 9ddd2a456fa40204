"""What must hold of any prefix cache's state, whatever the model says, read from the
implementation as plain data (`NodeView`s). Each is a contract a scheduler relies on; every
violation is reported, with its numbers."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass
class NodeView:
    """One node of an implementation's tree: `path` names it (namespace, tokens from the root to
    its end); `edge` is the key its parent files it under, as (namespace, first page) when the
    judge could read it (("unreadable", raw) otherwise)."""

    path: tuple
    parent: tuple | None  # the parent's path; None: the parent is the root
    edge: tuple | None    # None: the cache does not expose it (the unified Rust core)
    key: tuple[int, ...]
    value: list[int]
    lock: int
    hits: int
    priority: int
    access: float
    created: float


def size_problems(name: str, counter: int, nodes: list[NodeView], locked: bool) -> list[str]:
    """`evictable_size()` (`locked` False) or `protected_size()` against the sum over the nodes
    it counts, with the sign: what a leak check comparing them with `!=` cannot say."""
    total = sum(len(n.key) for n in nodes if (n.lock > 0) == locked)
    if counter == total:
        return []
    which = "locked" if locked else "unlocked"
    if counter > total:
        return [f"{name}() says {counter}, its {which} nodes hold {total}: {counter - total} "
                f"tokens counted twice"]
    return [f"{name}() says {counter}, its {which} nodes hold {total}: {total - counter} tokens "
            f"missing from the count"]


def tree_violations(nodes: list[NodeView], page_size: int) -> list[str]:
    """No slot in two places, edges keyed by their child's first page, lock counts monotone
    from parent to child and never negative, whole pages."""
    problems = []
    twice = sorted(s for s, n in Counter(s for node in nodes for s in node.value).items() if n > 1)
    if twice:
        problems.append(f"{len(twice)} slots twice in the tree, e.g. {twice[:6]}")
    by_path = {n.path: n for n in nodes}
    for node in nodes:
        expected = (node.path[0], tuple(node.key[:page_size]))
        if node.edge is not None and node.edge != expected:
            problems.append(f"node {node_name(node.path)} is filed under edge {node.edge}, not its "
                            f"first page {expected}")
            break
    problems += lock_order_violations(nodes, by_path)
    for node in nodes:
        if len(node.value) != len(node.key) or len(node.key) % page_size:
            problems.append(f"node {node_name(node.path)} holds {len(node.value)} slots for "
                            f"{len(node.key)} tokens (pages of {page_size})")
            break
        if page_size == 1:  # a slot is a whole page (the list below would cost a list a slot)
            continue
        pages = [node.value[i:i + page_size] for i in range(0, len(node.value), page_size)]
        torn = [page for page in pages
                if page[0] % page_size or page != list(range(page[0], page[0] + page_size))]
        if torn:
            problems.append(f"node {node_name(node.path)}: slots {torn[0]} are not one whole page")
            break
    return problems


def page_locks(nodes: list[NodeView], page_size: int, ids: dict) -> dict:
    """Each cached page with the lock count of the node that holds it, named by (namespace, the
    id of its prefix): a split keeps the count on both halves, so pages compare across an op
    that splits a node where nodes do not. A prefix's id is interned page by page in `ids`
    ((previous page's id, this page's tokens) -> id; shared by the two sides compared), so a
    path costs its length once, not the sum of its prefixes' lengths (quadratic at page size 1:
    0.5 s for one 2,000-token path when every prefix was a tuple of its own)."""
    found = {}
    for node in nodes:
        ns, tokens = node.path
        start, prefix = len(tokens) - len(node.key), None
        for end in range(page_size, len(tokens) + 1, page_size):
            prefix = ids.setdefault((prefix, tokens[end - page_size:end]), len(ids))
            if end > start:
                found[(ns, prefix)] = (node.lock, node.path, end)
    return found


def pair_violations(before: list[NodeView], after: list[NodeView], page_size: int) -> list[str]:
    """A lock taken and released within one op (the scheduler's lock and unlock around a check:
    a pin) leaves every page's lock count at its baseline, the count before the op: what a
    model-free judge sees of an unlock that misses part of what its lock took."""
    ids: dict = {}
    was, now = page_locks(before, page_size, ids), page_locks(after, page_size, ids)
    moved = [page for page in was.keys() & now.keys() if was[page][0] != now[page][0]]
    if not moved:
        return []
    # the page nearest the root is named (the lowest end; then namespace and id, for one answer)
    page = min(moved, key=lambda p: (was[p][2], str(p[0]), p[1]))
    _, (ns, tokens), end = was[page]
    return [f"lock counts not back to baseline after a lock/unlock pair: the page ending "
            f"{node_name((ns, tokens[:end]))} had lock {was[page][0]} before, {now[page][0]} "
            f"after ({len(moved)} pages moved)"]


def eviction_violations(before: list[NodeView], after: list[NodeView]) -> list[str]:
    """Nodes leave the tree (outside a reset) only by eviction, and eviction takes only unlocked
    leaves: a node gone since the last op had no lock then, and no node below it stays (its
    children went first, in the same op or before). A node stays when the op leaves its path,
    key and slots as they were: one the op made afresh after evicting its old self and its
    parent, say an insert's, holds the parent's tokens too. A split keeps the lower node's
    path, so a path that is gone is a node that is gone."""
    kept = {node.path for node in after}
    same = {(node.path, node.key, tuple(node.value)) for node in after}
    stays = [node for node in before if (node.path, node.key, tuple(node.value)) in same]
    for node in before:
        if node.path in kept:
            continue
        if node.lock > 0:
            return [f"node {node_name(node.path)} left the tree while locked (lock {node.lock}): "
                    f"eviction takes only unlocked leaves"]
        ns, tokens = node.path
        below = next((other for other in stays if other.path[0] == ns and
                      len(other.path[1]) > len(tokens) and other.path[1][:len(tokens)] == tokens),
                     None)
        if below is not None:
            return [f"node {node_name(node.path)} left the tree while node "
                    f"{node_name(below.path)} below it stays: eviction takes only leaves"]
    return []


def lock_order_violations(nodes: list[NodeView], by_path: dict) -> list[str]:
    """Lock counts never negative and monotone from parent to child: a lock holds the whole
    path above its node, so no node is held by more locks than its parent."""
    for node in nodes:
        parent = by_path.get(node.parent) if node.parent is not None else None
        if node.lock < 0 or (parent is not None and parent.lock < node.lock):
            return [f"lock counts not monotone: node {node_name(node.path)} has {node.lock}, "
                    f"its parent {parent.lock if parent else 'root'}"]
    return []


def pool_violations(nodes: list[NodeView], free_pages: list[int], held: set[int],
                    page_size: int, capacity: int, available: int, evictable: int,
                    protected: int) -> list[str]:
    """No page both cached and free, or free twice; the allocator's free tokens plus the tree's
    evictable and protected tokens plus what requests hold themselves make the capacity."""
    problems = []
    cached = {s // page_size for node in nodes for s in node.value}
    both = sorted(cached & set(free_pages))
    if both:
        problems.append(f"{len(both)} pages both in the tree and on the free list, e.g. "
                        f"{both[:6]}")
    twice = sorted(p for p, n in Counter(free_pages).items() if n > 1)
    if twice:
        problems.append(f"{len(twice)} pages twice on the free list, e.g. {twice[:6]}")
    total = available + evictable + protected + len(held) * page_size
    if total != capacity:
        off = total - capacity
        problems.append(f"available {available} + evictable {evictable} + protected {protected} "
                        f"+ held by requests {len(held) * page_size} = {total}, not the capacity "
                        f"{capacity}: {abs(off)} tokens {'counted twice' if off > 0 else 'lost'}")
    return problems


def node_name(path: tuple) -> str:
    """A node (namespace, tokens from the root) for a report: its last tokens."""
    ns, tokens = path
    return f"[{tail(tokens)}]" + (f" ns{ns}" if ns else "")


def tail(tokens) -> str:
    return ("... " if len(tokens) > 8 else "") + " ".join(str(t) for t in tokens[-8:])
