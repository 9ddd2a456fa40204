"""What the SWA judge (`swa_lockstep.py`) checks of a unified cache with the SWA component after
every op, from one snapshot (`impl/unified/reader.py`, its "swa" part) and the oracle's facts
(`oracle.unified.swa`): each node's SWA slots against its full slots, both pools conserved (no
slot in the tree twice or also free, free + cached + held = capacity, per pool), the sizes
against the nodes with their sign, `total_size()`, and a match's length against the deepest
node whose window the tree keeps live."""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.radix.state import namespace
from kvfuzz.oracle.radix.invariants import NodeView, node_name, pool_violations, size_problems
from kvfuzz.oracle.unified.swa import accepted_length, locked_window, window_covered


def swa_problems(snap: dict, nodes: list[NodeView], page_size: int,
                 size: int) -> list[tuple[str, str]]:
    swa, problems = snap["swa"], []
    values = swa["values"]
    for node, value, mapped in zip(nodes, values, swa["mapped"]):
        if value is not None and value != mapped:
            problems.append(("swa value", f"node {node_name(node.path)} holds SWA slots "
                                          f"{value[:6]}, its full slots map to {mapped[:6]}"))
            break
    # Full attention: the requests' own pages past their protected length.
    held = {slot // page_size for rid, row in snap["rows"].items()
            for slot in row[swa["requests"][rid][0]:]} if swa["requests"] else set()
    problems += full_pool_problems(snap, nodes, held, page_size, size)
    live = [slot for value in values if value for slot in value]
    twice = sorted(s for s, n in Counter(live).items() if n > 1)
    if twice:
        problems.append(("swa slots", f"{len(twice)} SWA slots twice in the tree, e.g. "
                                      f"{twice[:6]}"))
    swa_held = {slot // page_size for held in swa["requests"].values() for slot in held[3]}
    swa_nodes = [NodeView(n.path, n.parent, None, n.key, v or [], n.lock, 0, 0, 0.0, 0.0)
                 for n, v in zip(nodes, values)]
    cached = len(live)
    # The SWA pool, in the full pool's words: "evictable" is the tree's live SWA slots.
    problems += [("swa pool", text) for text in pool_violations(
        swa_nodes, swa["free"], swa_held, page_size, size, swa["available"], cached, 0)]
    if swa["evictable"] + swa["protected"] != cached:
        off = swa["evictable"] + swa["protected"] - cached
        problems.append(("swa sizes", f"swa_evictable_size() {swa['evictable']} + "
                                      f"swa_protected_size() {swa['protected']} vs {cached} live "
                                      f"SWA slots in the tree: {abs(off)} "
                                      f"{'counted twice' if off > 0 else 'missing'}"))
    full = sum(len(n.value) for n in nodes)
    if list(snap["total"][:2]) != [full, cached]:
        problems.append(("total_size", f"total_size() says {tuple(snap['total'])}, the nodes "
                                       f"hold {full} full and {cached} SWA slots"))
    return problems


def full_pool_problems(snap: dict, nodes: list[NodeView], held: set, page_size: int,
                       size: int) -> list[tuple[str, str]]:
    """The full-attention pool conserved (`held`: the pages requests hold themselves) and the
    full sizes against the nodes, with their sign."""
    problems = [("allocator", text) for text in pool_violations(
        nodes, snap["free"], held, page_size, size, snap["available"], snap["evictable"],
        snap["protected"])]
    for name, locked in (("evictable", False), ("protected", True)):
        problems += [(f"{name}_size", text) for text in
                     size_problems(f"{name}_size", snap[name], nodes, locked)]
    return problems


def match_problems(nodes: list[NodeView], values: list, ns: int, key, matched: int,
                   window: int) -> list[tuple[str, str]]:
    """A match of `key` (page-aligned, within its limit) said `matched` tokens: the deepest node
    of the tree on the key's path whose window is live ends there."""
    on_path = sorted((len(n.path[1]), n, value) for n, value in zip(nodes, values)
                     if namespace_of(n) == ns and tuple(key[:len(n.path[1])]) == n.path[1])
    segments = [(len(node.key), value is not None) for _, node, value in on_path]
    expected = accepted_length(segments, window)
    if matched == expected:
        return []
    ends = {length: value is not None for length, _, value in on_path}
    where = "a tombstone" if ends.get(matched) is False else "no node end" \
        if matched and matched not in ends else "a node"
    ok = window_covered(segments[:sum(1 for length in ends if length <= matched)], window)
    return [("swa match", f"matched {matched} tokens, ending at {where} "
                          f"({'window live' if ok else 'less than a window of live SWA'}); the "
                          f"deepest node with its {window}-token window live ends at {expected}")]


def namespace_of(node: NodeView):
    return node.path[0]


def key_namespace(ns: int):
    """A trace namespace as the nodes name it (the driver's extra_key "ns<k>")."""
    return namespace(f"ns{ns}" if ns else None)


def pin_problems(nodes: list[NodeView], values: list, locks: list, ns: int, key,
                 added: int, window: int) -> list[tuple[str, str]]:
    """A pin of `key` added `added` to `swa_protected_size()` while it held its lock: the SWA
    slots of the trailing window above the node its match ended at that no other lock held
    (`oracle.unified.swa.locked_window`), not the whole path. `locks`: each node's SWA lock
    count after the pin (its own released)."""
    on_path = sorted((len(n.path[1]), n, value, lock) for n, value, lock in
                     zip(nodes, values, locks)
                     if namespace_of(n) == ns and tuple(key[:len(n.path[1])]) == n.path[1])
    end = accepted_length([(len(node.key), value is not None) for _, node, value, _ in on_path],
                          window)
    expected = locked_window([(len(node.key), None if value is None else len(value), lock > 0)
                              for _, node, value, lock in on_path], end, window)
    if added == expected:
        return []
    return [("swa lock", f"pin({len(key)} tokens) added {added} SWA slots to the protected size "
                         f"while locked, expected {expected}: the unlocked SWA of the "
                         f"{window}-token window above the node its match ended at ({end} "
                         f"tokens)")]

