"""What a scheduler and HiCache rely on from the unified cache's host tier (full attention,
write-back; read in SGLang 0.5.23's `unified_tree_core.py`, `components/full.py` and
`unified_radix_cache.py`), as checks over a plain read of the tree (`impl/unified/host_tier.py:
HostDriver.host_state`: per node its path, Full device and host slots, locks, child count).
Standard library only; every function answers a list of (label, text) problems.

- accounting: every device slot in at most one node and free + cached = the device pool; every
  host slot in exactly one node or the host pool's free list; the Full sizes against the nodes;
  nothing locked between ops;
- tiers: every node has Full KV on the device, on the host or both (the tombstone walk after a
  leaf's deletion removes exactly the nodes left with neither), and a node on the device has its
  parent there too (device eviction takes leaves only, load-back and insert restore a path);
- a match: its device hit is the deepest device node on the key, device + host hit the deepest
  node of either tier (a device eviction of a backed node keeps it matchable through the host);
  a load-back makes the whole hit device-resident, a refused one changes nothing, and a host
  hit shorter than the cache's load-back threshold is not loaded (`_load_back_transfers`);
- host pressure (`evict_host`), under write-back: a settled duplicate (Full KV on both tiers,
  no host lock) is reclaimed before a sole host copy is evicted, an inner one before an
  evictable device leaf (`_reclaim_full_host_duplicates`' first pass spares imminent demotes);
  short of the tokens asked only when nothing reclaimable is left; what it answers is what
  left the host pool;
- a host lock: the locked node keeps its host copy through host pressure;
- a storage prefetch (`insert_host` of a key's miss): it starts where the match ends, and the
  key is matchable whole through the host after it;
- with the Rust core, the Python core run beside it answering every call alike and holding both
  pools in the same order (the checks above read the Python core's nodes)."""

from __future__ import annotations

LEAKED, TOMBSTONE, MATCH, RECLAIM_ORDER, HOST_LOCK, CORES = (
    "host accounting", "host tombstone", "host match", "host reclaim order", "host lock",
    "cores differ")


def _floor(length: int, page: int) -> int:
    return length // page * page


def _common(path: list, key: list) -> int:
    n = 0
    for a, b in zip(path, key):
        if a != b:
            break
        n += 1
    return n


def accounting_problems(state: dict) -> list:
    problems = []
    nodes = state["nodes"]
    device = [s for n in nodes if n["device"] is not None for s in n["device"]]
    host = [s for n in nodes if n["host"] is not None for s in n["host"]]
    if len(set(device)) != len(device):
        problems.append((LEAKED, f"a device slot is in two nodes: {sorted(device)}"))
    if len(device) + state["device_free"] != state["device_size"]:
        problems.append((LEAKED, f"device: {len(device)} cached + {state['device_free']} free "
                                 f"!= {state['device_size']} (a slot leaked or freed twice)"))
    held = host + state["host_free"]
    if sorted(held) != list(range(state["host_size"])):
        twice = sorted({s for s in held if held.count(s) > 1})
        lost = sorted(set(range(state["host_size"])) - set(held))
        problems.append((LEAKED, f"host: {len(host)} cached + {len(state['host_free'])} free of "
                                 f"{state['host_size']}; twice {twice}, lost {lost}"))
    if state["evictable"] + state["protected"] != len(device):
        problems.append((LEAKED, f"evictable {state['evictable']} + protected "
                                 f"{state['protected']} != {len(device)} device slots cached"))
    locked = [n["path"] for n in nodes if n["lock"] or n["host_lock"]]
    if locked or state["protected"]:
        problems.append((LEAKED, f"locks left between ops: {locked[:3]}, protected "
                                 f"{state['protected']}"))
    return problems


def tier_problems(state: dict) -> list:
    problems = []
    for node in state["nodes"]:
        if node["device"] is None and node["host"] is None:
            problems.append((TOMBSTONE, f"node {node['path']} has Full KV on neither tier and "
                                        f"stays in the tree"))
        elif node["device"] is not None and not node["parent_device"]:
            problems.append((TOMBSTONE, f"node {node['path']} is on the device under a parent "
                                        f"that is not"))
    return problems


def match_expected(state: dict, ns, key: list, page: int) -> tuple[int, int]:
    """(device hit, device + host hit) of `key` in namespace `ns` over `state`."""
    device = total = 0
    for node in state["nodes"]:
        if node["path"][0] != ns:
            continue
        hit = _floor(_common(node["path"][1], key), page)
        total = max(total, hit)
        if node["device"] is not None:
            device = max(device, hit)
    return device, total


def match_problems(before: dict, ns, key: list, page: int, answer: list) -> list:
    """`answer`: [device hit, host hit, loaded, device hit after]."""
    device, host, loaded, after = answer
    want_device, want_total = match_expected(before, ns, key, page)
    if (device, device + host) != (want_device, want_total):
        return [(MATCH, f"match of {len(key)} tokens: device hit {device}, host hit {host}; "
                        f"expected {want_device} and {want_total - want_device} (the deepest "
                        f"device node, the deepest node of either tier)")]
    if loaded and host < before["load_back_threshold"]:
        return [(MATCH, f"a host hit of {host} tokens was loaded back, under the cache's "
                        f"load-back threshold of {before['load_back_threshold']}")]
    if host and after != (want_total if loaded else device):
        return [(MATCH, f"load-back {'made' if loaded else 'refused'}: device hit after "
                        f"{after}, expected {want_total if loaded else device}")]
    return []


def _by_path(state: dict) -> dict:
    return {(node["path"][0], tuple(node["path"][1])): node for node in state["nodes"]}


def _device_leaf(nodes: dict, path) -> bool:
    """Whether the node at `path` is an evictable device leaf: on the device, unlocked, and no
    node below it on the device."""
    node = nodes[path]
    if node["device"] is None or node["lock"]:
        return False
    ns, tokens = path
    return not any(other[0] == ns and len(other[1]) > len(tokens) and
                   other[1][:len(tokens)] == tokens and below["device"] is not None
                   for other, below in nodes.items())


def pressure_problems(before: dict, after: dict, asked: int, freed: int,
                      pinned=None) -> list:
    """Host pressure of `asked` tokens answered `freed`; `pinned`: the path under a host lock
    (not reclaimable)."""
    old, new = _by_path(before), _by_path(after)
    write_back = before.get("write_back", True)
    gone = len(after["host_free"]) - len(before["host_free"])
    if freed != gone:
        return [(LEAKED, f"evict_host({asked}) answered {freed}, {gone} host slots came free")]

    def reclaimable(path, node):
        return node["device"] is not None and node["host"] is not None and \
            not node["host_lock"] and path != pinned

    sole_lost = [path for path, node in old.items() if node["host"] is not None and
                 node["device"] is None and (path not in new or new[path]["host"] is None)]
    kept = [path for path, node in old.items() if reclaimable(path, node) and
            path in new and new[path]["host"] is not None]
    if not write_back:  # write-through reclaims no duplicates: host leaves alone
        kept = []
    if sole_lost and kept:
        return [(RECLAIM_ORDER, f"evict_host({asked}) evicted the sole host copy of "
                                f"{list(sole_lost[0][1])} while the settled duplicate "
                                f"{list(kept[0][1])} kept its host copy")]
    # the first pass spares duplicates that are evictable device leaves (a device eviction
    # would soon demote them, needing their host copy): they go only when the rest do not do
    taken = [path for path, node in old.items() if reclaimable(path, node) and
             (path not in new or new[path]["host"] is None)]
    inner_kept = [path for path in kept if not _device_leaf(old, path)]
    leaf_taken = [path for path in taken if _device_leaf(old, path)]
    if leaf_taken and inner_kept:
        return [(RECLAIM_ORDER, f"evict_host({asked}) reclaimed the device leaf "
                                f"{list(leaf_taken[0][1])}'s host copy while the inner "
                                f"duplicate {list(inner_kept[0][1])} kept its own")]
    if freed < asked:
        left = [path for path, node in new.items() if path != pinned and
                node["host"] is not None and not node["host_lock"] and
                ((write_back and node["device"] is not None) or
                 (node["device"] is None and node["children"] == 0))]
        if left:
            return [(RECLAIM_ORDER, f"evict_host({asked}) freed {freed} while "
                                    f"{list(left[0][1])}'s host copy was reclaimable")]
    return []


def twin_problems(cores: dict) -> list:
    """The Rust core against the Python core run beside it: every answer since the last read
    (`answers`: [call, Rust's, Python's]) and both pools in order, the Full sizes."""
    for call, rust, python in cores["answers"]:
        if rust != python:
            return [(CORES, f"{call}: the Rust core answered {rust}, the Python core {python}")]
    for part, rust in cores["rust"].items():
        if rust != cores["python"][part]:
            return [(CORES, f"{part}: the Rust core's {rust}, the Python core's "
                            f"{cores['python'][part]}")]
    return []


def prefetch_problems(before: dict, after: dict, ns, key: list, answer: list,
                      page: int) -> list:
    """A storage prefetch of `key`'s miss (`answer`: [matched, fetched, inserted]): it starts
    where the match ended, and what it inserted is matchable through the host after it (the
    whole key, unless host pressure took some of the tree's own host copies for it)."""
    matched, miss, inserted = answer
    if matched != match_expected(before, ns, key, page)[1] or matched + miss != len(key):
        return [(MATCH, f"prefetch of {len(key)} tokens started at {matched} with {miss} to "
                        f"fetch; the tree read before matched "
                        f"{match_expected(before, ns, key, page)[1]}")]
    if inserted > 0 and match_expected(after, ns, key, page)[1] != len(key):
        return [(MATCH, f"prefetch inserted {inserted} tokens of {len(key)}, and the key "
                        f"matches {match_expected(after, ns, key, page)[1]} after it")]
    return []


def host_lock_problems(answer: list) -> list:
    """`answer`: [path length, had a host copy, kept it, freed]."""
    _, had, kept, _ = answer
    if had and not kept:
        return [(HOST_LOCK, "a node under a host lock lost its host copy to host pressure")]
    return []
