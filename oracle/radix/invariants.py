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
    for node in nodes:
        parent = by_path.get(node.parent) if node.parent is not None else None
        if node.lock < 0 or (parent is not None and parent.lock < node.lock):
            problems.append(f"lock counts not monotone: node {node_name(node.path)} has "
                            f"{node.lock}, its parent {parent.lock if parent else 'root'}")
            break
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
