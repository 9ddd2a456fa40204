"""A unified cache's state as the radix judge reads a tree (`NodeView`s by path, `fuzz/radix/
state.py`), from what its tree core exposes (`impl/unified/reader.py`), and what only the unified
cache's public calls show: the KV-canary walk and the tree's own counts.

Each core is compared at the resolution it exposes. The Python core shows its node objects, so
every field is compared as the radix judge compares them. The Rust core shows paths, slots and
which slots are locked: its nodes carry lock 1 (locked) or 0, no edge, hit count, priority or
times, and the model's views are cut to the same before they are set side by side (its eviction
order, judged by the pages each eviction took, still shows all of them)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from kvfuzz.fuzz.radix.state import MASK, edge_of, namespace, ranks
from kvfuzz.fuzz.radix.state import counter_problems
from kvfuzz.oracle.radix.invariants import NodeView
from kvfuzz.oracle.counts import same_counts


def views(snap: dict, page_size: int) -> list[NodeView]:
    unlocked, inner = set(snap["unlocked"]), snap["inner"]
    found = []
    for i, (parent, extra, tokens, start, value, _) in enumerate(snap["nodes"]):
        up = found[parent] if parent >= 0 else None
        value = list(value or ())
        path = (namespace(extra), tuple(tokens))
        key = tuple(tokens[start:])
        if inner is None:
            locked = bool(value) and not set(value) <= unlocked
            view = NodeView(path, up.path if up else None, None, key, value, int(locked), 0, 0,
                            0.0, 0.0)
        else:
            edge, own_key, lock, hits, priority, access, created = inner[i]
            view = NodeView(path, up.path if up else None, edge_of(edge, page_size),
                            tuple(own_key), value, lock, hits, priority, access, created)
        found.append(view)
    return found


def exposed(expected: list[NodeView], snap: dict) -> list[NodeView]:
    """The model's views at the resolution the core exposes: a field no node has (SGLang
    0.5.11's nodes keep no priority and no creation time: None) is left out of both."""
    inner = snap["inner"]
    if isinstance(inner, list) and inner:
        absent = {name: None for name, at in (("priority", 4), ("created", 6))
                  if all(row[at] is None for row in inner)}
        return [replace(node, **absent) for node in expected] if absent else expected
    if inner is not None:
        return expected
    # (what `replace(node, lock=min(node.lock, 1), hits=0, priority=0, access=0.0,
    # created=0.0)` builds, field by field: `replace` reads the fields anew for every node, and
    # this runs after every op of a Rust trace, a few times)
    return [NodeView(node.path, node.parent, node.edge, node.key, node.value, min(node.lock, 1),
                     0, 0, 0.0, 0.0) for node in expected]


def expected_walk(expected: list[NodeView]) -> list[tuple[int, int, int]]:
    """(slot, position from the root, the slot before it) of every slot of the model's tree:
    what `walk_for_kv_canary` answers of it."""
    want, last = [], {}  # last: a node's path -> its last slot
    for node in expected:
        prev = last.get(node.parent, -1) if node.parent is not None else -1
        depth = len(node.path[1]) - len(node.key)
        want.extend(zip(node.value, range(depth, depth + len(node.value)),
                        [prev] + node.value[:-1]))
        last[node.path] = node.value[-1] if node.value else prev
    return want


def light_problems(model, light: dict, expected: list[NodeView],
                   shown: list[NodeView] | None = None) -> list[tuple[str, str]]:
    """An op between two whole reads: the sizes and rows (as the radix judge's light read), the
    digests of the walk, of the unlocked slots and of the nodes (at the resolution the core
    shows them: `light["inner"]`) against the model's tree's, `total_size()`. The nodes' digest
    is what lets the judge's eviction and pin checks take the model's nodes for the core's after
    a light read: the walk and the unlocked slots alone do not show a lock count that changed on
    a node that stays locked, nor where nodes split. `shown`: `exposed(expected, ...)` at the
    light read's resolution where the caller has it already (the judge's `as_read`)."""
    problems = counter_problems(model, light, expected)
    want = expected_walk(expected)
    unlocked = [s for node in expected if not node.lock for s in node.value]
    if shown is None:
        shown = exposed(expected, {"inner": [] if light["inner"] else None})
    absent = {name: None for name in light.get("absent", ())}  # (fields no node has: 0.5.11)
    shown = [replace(node, **absent) for node in shown] if absent else shown
    if (light["num_walk"], light["walk"]) != (len(want), sum(map(hash, want)) & MASK):
        problems.append(("walk", f"the walk's digest differs from the model's tree's "
                                 f"({light['num_walk']} slots walked, expected {len(want)})"))
    elif (light["num_unlocked"], light["unlocked"]) != \
            (len(unlocked), sum(map(hash, unlocked)) & MASK):
        problems.append(("tree", f"the unlocked slots' digest differs from the model's "
                                 f"({light['num_unlocked']} unlocked, expected {len(unlocked)})"))
    elif (light["num_nodes"], light["nodes"]) != (len(shown), node_digest(shown, light["inner"])):
        what = "locks, keys, slots" + (", hit counts, priorities, times" if light["inner"] else "")
        problems.append(("tree", f"the nodes' digest ({what}) differs from the model's "
                                 f"({light['num_nodes']} nodes, expected {len(shown)})"))
    total = light["total"]
    if total[0] != len(want) or total[1:] != [0] * (len(total) - 1):
        problems.append(("total_size", f"total_size() says {tuple(total)}, the model's tree "
                                       f"holds {len(want)} full-attention slots"))
    return problems


def node_digest(nodes: list[NodeView], inner: bool) -> int:
    """What `impl/unified/reader.py:node_digest` computes of a core's nodes, of `NodeView`s (the
    model's, cut to what the core shows: `exposed`): the sum of one hash a node of (namespace,
    path, key, slots, lock) and, where the core shows its node objects (`inner`), (hit count,
    priority, the ranks of its access and creation times)."""
    if inner:  # (the times are read only where the core shows them)
        access = ranks(n.access for n in nodes)
        created = ranks(n.created for n in nodes)
    total = 0
    for n in nodes:
        ns, tokens = n.path
        row = (ns if type(ns) is int else -1, tuple(tokens), tuple(n.key), tuple(n.value),
               n.lock)
        if inner:
            row += (n.hits, -1 if n.priority is None else n.priority, access[n.access],
                    created[n.created])  # (None: a field no node has, as the reader's -1)
        total += hash(row)
    return total & MASK


def walk_problems(snap: dict, expected: list[NodeView]) -> list[tuple[str, str]]:
    """The KV-canary walk (every cached slot with its position from the root and the slot before
    it) against the model's tree, and the tree's own counts against its nodes."""
    want = Counter(expected_walk(expected))
    got = Counter(map(tuple, snap["walk"]))
    problems = []
    if not same_counts(got, want):
        wrong, missing = sorted(got - want), sorted(want - got)
        problems.append(("walk", f"walk_for_kv_canary: {len(wrong)} (slot, position, previous "
                                 f"slot) rows the tree does not have, e.g. {wrong[:3]}; "
                                 f"{len(missing)} it misses, e.g. {missing[:3]}"))
    named = sorted(s for row in snap["nodes"] for s in row[4] or ())
    walked = sorted(row[0] for row in snap["walk"])
    if named != walked:
        problems.append(("tree", f"the walk shows {len(walked)} slots, the nodes its calls "
                                 f"named hold {len(named)}: a node no call ever returned"))
    children = Counter(row[0] for row in snap["nodes"] if row[0] >= 0)
    for i, row in enumerate(snap["nodes"]):
        if row[5] is not None and row[5] != children[i]:  # None: not reported (0.5.22)
            problems.append(("tree", f"collect_path_info says node {i} has {row[5]} children, "
                                     f"{children[i]} are named"))
            break
    total = len(named)
    if snap["total"][0] != total or snap["total"][1:] != [0] * (len(snap["total"]) - 1):
        problems.append(("total_size", f"total_size() says {tuple(snap['total'])}, the nodes "
                                       f"hold {total} full-attention slots and nothing else"))
    for name, plain in (("full_evictable", "evictable"), ("full_protected", "protected")):
        if snap[name] != snap[plain]:
            problems.append((f"{name}_size", f"{name}_size() says {snap[name]}, "
                                             f"{plain}_size() {snap[plain]} (one component)"))
    return problems
