"""A prefix cache's whole state against the radix model's, after every op: the invariants first
(each a contract a scheduler relies on: `oracle.radix.invariants`), then what the model says
exactly (the evicted pages, every node, the free pages, the rows, the KV events).

The implementation's snapshot (`impl.radix.reader`) names nodes by parent index and edge; here
they become `NodeView`s named by their path, as the model's nodes are."""

from __future__ import annotations

from collections import Counter

from kvfuzz.impl.poison import POISON
from kvfuzz.oracle.radix.invariants import (NodeView, eviction_violations, node_name,
                                            pair_violations, pool_violations, size_problems)
from kvfuzz.oracle.radix.tree import sizes
from kvfuzz.strategies.radix.trace import Pin, Reset
from kvfuzz.oracle.counts import same_counts

FIELDS = ("key", "value", "lock", "hits", "priority")


def namespace(extra_key) -> int | str:
    """The trace's namespace of an `extra_key` (the driver's "ns<k>"; 0: none)."""
    if extra_key is None:
        return 0
    text = str(extra_key)
    return int(text[2:]) if text.startswith("ns") and text[2:].isdigit() else text


def edge_of(raw, page_size: int):
    """(namespace, first page) of an edge key as SGLang files it: a token (page size 1) or a
    tuple of tokens, behind the extra_key when there is one."""
    if isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[0], str):
        inner = edge_of(raw[1], page_size)
        return inner if inner[0] == "unreadable" else (namespace(raw[0]), inner[1])
    if isinstance(raw, int) and page_size == 1:
        return 0, (raw,)
    if isinstance(raw, tuple) and all(isinstance(t, int) for t in raw):
        return 0, raw
    return "unreadable", raw  # never a node's first page: reported as a wrong edge


def views(raw_nodes: list, page_size: int) -> list[NodeView]:
    found = []
    for parent, edge, extra, key, value, lock, hits, priority, access, created in raw_nodes:
        up = found[parent] if parent >= 0 else None
        ns = namespace(extra)
        path = (ns, (up.path[1] if up else ()) + tuple(key))
        found.append(NodeView(path, up.path if up else None, edge_of(edge, page_size),
                              tuple(key), list(value or ()), lock, hits, priority, access,
                              created))
    return found


def ranks(values) -> dict:
    return {v: i for i, v in enumerate(sorted(set(values)))}


def node_problems(expected: list[NodeView], actual: list[NodeView]) -> list[tuple[str, str]]:
    """The first node that is missing, extra or different, and whether the nodes' access and
    creation times are in the model's order (the order every eviction policy reads)."""
    want, got = {n.path: n for n in expected}, {n.path: n for n in actual}
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        what = (f"missing node {node_name(missing[0])}" if missing else "") + \
            (" and " if missing and extra else "") + \
            (f"extra node {node_name(extra[0])}" if extra else "")
        return [("tree", f"{what} ({len(missing)} missing, {len(extra)} extra of "
                         f"{len(want)} nodes)")]
    for path, node in want.items():
        other = got[path]
        for name in FIELDS:
            if getattr(node, name) != getattr(other, name):
                return [("tree", f"node {node_name(path)}: {name} expected "
                                 f"{_short(getattr(node, name))}, actual "
                                 f"{_short(getattr(other, name))}")]
    for name in ("access", "created"):
        rank_want = ranks(getattr(n, name) for n in expected)
        rank_got = ranks(getattr(n, name) for n in actual)
        for path, node in want.items():
            if rank_want[getattr(node, name)] != rank_got[getattr(got[path], name)]:
                return [("tree", f"node {node_name(path)}: {name} time out of the model's order "
                                 f"(rank {rank_got[getattr(got[path], name)]} of "
                                 f"{len(rank_got)} distinct times, expected "
                                 f"{rank_want[getattr(node, name)]} of {len(rank_want)})")]
    return []


def pool_problems(model, snap: dict, nodes: list[NodeView]) -> list[tuple[str, str]]:
    """Sizes (with their sign), the allocator's accounting, its free pages, the rows."""
    problems = [("evictable_size", text)
                for text in size_problems("evictable_size", snap["evictable"], nodes, False)]
    problems += [("protected_size", text)
                 for text in size_problems("protected_size", snap["protected"], nodes, True)]
    problems += [("allocator", text) for text in pool_violations(
        nodes, snap["free"], model.held(), model.page_size, model.size, snap["available"],
        snap["evictable"], snap["protected"])]
    tree = model.tree
    for name, counter, total in (("evictable_size", snap["evictable"], tree.evictable_size()),
                                 ("protected_size", snap["protected"], tree.protected_size()),
                                 ("available_size", snap["available"], model.available_size())):
        if counter != total:
            problems.append((name, f"expected {total}, actual {counter}"))
    free = set(snap["free"])
    if free != model.free:
        lost, extra = sorted(model.free - free), sorted(free - model.free)
        problems.append(("free pages", f"{len(lost)} pages not free that should be "
                                       f"{lost[:6]}, {len(extra)} free that should not be "
                                       f"{extra[:6]}"))
    for rid, request in model.requests.items():
        if request.stale:
            continue
        row = snap["rows"].get(rid)
        if row != request.row:
            problems.append(("row", f"r{rid}'s row: expected {_short(request.row)}, actual "
                                    f"{_short(row)}"))
            break
    return problems


def lock_problems(op, before, after: list[NodeView], page_size: int,
                  evicted: bool) -> list[tuple[str, str]]:
    """What the implementation's own nodes before and after `op` show, with no model: after an
    op that evicted, only unlocked leaves left the tree, and after a pin (a lock and its unlock
    in one op) every page's lock count is at its baseline. `before()`: the nodes after the op
    before it (None before the first), read only where a check applies: each costs a walk over
    every node's path."""
    evicted = evicted and not isinstance(op, Reset)
    if not evicted and not isinstance(op, Pin):
        return []
    before = before()
    if before is None:
        return []
    problems = [("eviction leaves", text) for text in eviction_violations(before, after)] \
        if evicted else []
    if isinstance(op, Pin):
        problems += [("lock baseline", text) for text in pair_violations(before, after, page_size)]
    return problems


def locked_problems(model, names, actual_pages: Counter) -> list[tuple[str, str]]:
    """Every page on a live request's locked path is still cached."""
    for rid, request in model.requests.items():
        if request.stale or request.node is None or request.node is model.tree.root:
            continue
        pages = names.of_path(*request.node.path(), model.page_size)
        gone = next((page for page in pages if not actual_pages[page]), None)
        if gone is not None:
            return [("locked node evicted", f"r{rid} holds a lock on [{names.tail(pages[-1])}], "
                                            f"but its page ending [{names.tail(gone)}] is gone")]
    return []


def eviction_problems(names, expected_gone: Counter, actual_gone: Counter,
                      policy: str) -> list[tuple[str, str]]:
    """Pages an eviction took against those the model's policy takes."""
    if same_counts(expected_gone, actual_gone):
        return []
    wrong, kept = actual_gone - expected_gone, expected_gone - actual_gone
    text = []
    if wrong:
        text.append(f"evicted the page ending [{names.first_tail(wrong)}], which {policy} keeps")
    if kept:
        text.append(f"kept the page ending [{names.first_tail(kept)}], which {policy} evicts "
                    f"first")
    return [("eviction order", "; ".join(text) + f" ({sum(actual_gone.values())} pages gone, "
                                                 f"expected {sum(expected_gone.values())})")]


def alias_problems(aliases: list, nodes: list[NodeView]) -> list[tuple[str, str]]:
    def who(side) -> str:
        if side[0] == "node":
            return f"node {node_name(nodes[side[1]].path)}'s value"
        return "the request rows (req_to_token)" if side[0] == "rows" else \
            f"the tensor the caller passed to insert (#{side[1] + 1})"
    return [("aliasing", f"{who(a)} shares memory with {who(b)}") for a, b in aliases[:2]]


def poisoned_nodes(nodes: list[NodeView]) -> list[tuple[str, str]]:
    for node in nodes:
        if POISON in node.value or POISON in node.key:
            return [("ownership", f"node {node_name(node.path)} shows {POISON}, what the caller "
                                  f"wrote over its tensor or key after the call: the tree kept "
                                  f"the caller's, not a copy")]
    return []


def _short(value, width: int = 70) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


MASK = (1 << 64) - 1


def view_digest(nodes: list[NodeView], page_size: int) -> int:
    """What `impl/radix/digest.py` computes of a tree, from `NodeView`s (the model's): the sum
    of one hash a node over (namespace, start, the edge it should be filed under, key, slots,
    lock, hits, priority, the ranks of its access and creation times)."""
    access = {t: i for i, t in enumerate(sorted({n.access for n in nodes}))}
    created = {t: i for i, t in enumerate(sorted({n.created for n in nodes}))}
    total = 0
    for n in nodes:
        ns, tokens = n.path
        key = tuple(n.key)
        total += hash((ns, len(tokens) - len(key), (ns, key[:page_size]), key, tuple(n.value),
                       n.lock, n.hits, n.priority, access[n.access], created[n.created]))
    return total & MASK


def light_problems(model, light: dict, expected: list[NodeView]) -> list[tuple[str, str]]:
    """An op between two whole reads: the size counters and the live rows against the model's
    (`counter_problems`), and the digest of every node against the model's nodes'
    (`view_digest`)."""
    problems = counter_problems(model, light, expected)
    if light["num_nodes"] != len(expected) or \
            light["digest"] != view_digest(expected, model.page_size):
        problems.append(("tree", f"the tree's digest differs from the model's "
                                 f"({light['num_nodes']} nodes, expected {len(expected)})"))
    return problems


def counter_problems(model, light: dict, expected: list[NodeView] | None = None
                     ) -> list[tuple[str, str]]:
    """The size counters and the live rows of a light read against the model's. `expected`:
    the model's views as they are now (`model.views()`), where the caller has them: the tree's
    evictable and protected sizes summed over them by the tree's own rule (`sizes`), not by two
    more walks of the tree after every op."""
    problems = []
    evictable, protected = sizes(model.tree.nodes() if expected is None else expected)
    for name, total in (("evictable_size", evictable),
                        ("protected_size", protected),
                        ("available_size", model.available_size())):
        if light[name.split("_")[0]] != total:
            problems.append((name, f"expected {total}, actual {light[name.split('_')[0]]}"))
    rows = light["rows"]
    for rid, request in model.requests.items():
        if not request.stale and rows.get(rid) != request.row:
            problems.append(("row", f"r{rid}'s row: expected {_short(request.row)}, actual "
                                    f"{_short(rows.get(rid))}"))
            break
    return problems
