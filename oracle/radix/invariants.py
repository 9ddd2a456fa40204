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


def page_locks(nodes: list[NodeView], page_size: int) -> dict:
    """Each cached page, named by (namespace, tokens from the root to its end), with the lock
    count of the node that holds it: a split keeps the count on both halves, so pages compare
    across an op that splits a node where nodes do not."""
    found = {}
    for node in nodes:
        ns, tokens = node.path
        for end in range(len(tokens) - len(node.key) + page_size, len(tokens) + 1, page_size):
            found[(ns, tokens[:end])] = node.lock
    return found


def pair_violations(before: list[NodeView], after: list[NodeView], page_size: int) -> list[str]:
    """A lock taken and released within one op (the scheduler's lock and unlock around a check:
    a pin) leaves every page's lock count at its baseline, the count before the op: what a
    model-free judge sees of an unlock that misses part of what its lock took."""
    was, now = page_locks(before, page_size), page_locks(after, page_size)
    moved = [page for page in sorted(was.keys() & now.keys()) if was[page] != now[page]]
    if not moved:
        return []
    page = moved[0]
    return [f"lock counts not back to baseline after a lock/unlock pair: the page ending "
            f"{node_name(page)} had lock {was[page]} before, {now[page]} after ({len(moved)} "
            f"pages moved)"]


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
