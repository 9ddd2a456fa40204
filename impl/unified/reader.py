"""The state of a `UnifiedRadixCache`, read after every call through its tree core's public calls,
as plain data. Node handles differ between the cores, so nodes are named by path: every handle
a call returned (`UnifiedDriver.paths`) is looked up with `collect_path_info` (its ancestors
too; a handle that raises `KeyError` is gone; before 0.5.22 the same read another way:
`paths.py`), its slots with `get_component_device_value`. SGLang 0.5.11's class has no core:
its own nodes are read through the same calls (`node_tree.py`, the driver's `tree_core`).
Which slots are locked comes from the KV-canary walk (`walk_for_kv_canary`, unlocked only), the
walk itself is read whole, and then the sizes, the allocator's free pages in order, the rows and
the KV events with their hashes. Where the core exposes its node objects (`node_by_id`: the
Python core) each node's edge, lock count, hit count, priority and times are read too
(`inner`); the Rust core raises `NotImplementedError` there."""

from __future__ import annotations

from kvfuzz.impl.driver_calls import staged_of
from kvfuzz.impl.radix.digest import namespace_int
from kvfuzz.impl.radix.ints import int_list
from kvfuzz.impl.radix.reader import aliases, event, plain, rows_of
from kvfuzz.impl.unified.paths import path_info


def snapshot(driver, compared_only: bool = False) -> dict:
    """`compared_only`: the twin's state, which is only compared with the primary's
    (`fuzz/unified/twin.py`): without the nodes' inner fields and the aliases, which the judge
    reads of the primary alone."""
    cache, allocator, core = driver.cache, driver.allocator, driver.tree_core
    nodes, values, handles = _nodes(driver)
    walk = core.walk_for_kv_canary(False, False)
    unlocked = core.walk_for_kv_canary(True, False).slot_indices
    inner = None if compared_only else _inner(core, handles, driver.root_handle())
    return {"nodes": nodes, "inner": inner,
            "walk": list(zip(int_list(walk.slot_indices), int_list(walk.positions),
                             int_list(walk.prev_slot_indices))),
            "unlocked": sorted(int_list(unlocked)),
            "evictable": int(cache.evictable_size()), "protected": int(cache.protected_size()),
            "full_evictable": int(cache.full_evictable_size()),
            "full_protected": int(cache.full_protected_size()),
            "total": [int(n) for n in cache.total_size()],
            "available": int(_pool(allocator).available_size()),
            "free": _free(_pool(allocator)),
            "rows": rows_of(driver), "events": [event(e) for e in cache.take_events()],
            "aliases": [] if compared_only else aliases(values, driver),
            "swa": _swa(driver, handles),
            "mamba": driver.mamba_state(handles) if driver.MAMBA is not None else None,
            # the unified memory pool's full side (the Full donor's): its allocated tokens
            **({"full_allocated": int(_pool(allocator).allocated_count())}
               if getattr(driver, "donor", False) else {})}


def sizes(driver) -> list:
    """(evictable, protected, total, available): the counts a whole read has too (the twin's,
    read after every op where its whole state is not)."""
    cache = driver.cache
    return [int(cache.evictable_size()), int(cache.protected_size()),
            [int(n) for n in cache.total_size()], int(_pool(driver.allocator).available_size())]


def _pool(allocator):
    """The full-attention pool: the allocator itself, or the hybrid allocator's full side."""
    return getattr(allocator, "full_attn_allocator", allocator)


def _free(pool) -> list[int]:
    if hasattr(pool, "virtual_to_physical"):  # a unified-memory sub-pool: no free list
        return unmapped(pool)
    return int_list(pool.free_pages) + staged_of(pool)


def unmapped(sub_pool) -> list[int]:
    """A unified sub-pool's free virtual pages (no physical page), the sink page 0 aside: it
    keeps no free list."""
    return [page for page, physical in enumerate(int_list(sub_pool.virtual_to_physical))
            if physical < 0 and 0 < page < sub_pool.num_virtual_ids]


def _swa(driver, handles: list) -> dict | None:
    """With the SWA component: each node's SWA slots (None: a tombstone) and what the hybrid
    allocator's full-to-SWA mapping gives for its full slots, the SWA pool's free pages and
    sizes, and the cache's SWA sizes."""
    if driver.SWA is None:
        return None
    cache, allocator, core = driver.cache, driver.allocator, driver.tree_core
    values, mapped = [], []
    mapping = allocator.full_to_swa_index_mapping
    for handle in handles:
        value = core.get_component_device_value(handle, driver.SWA)
        full = core.get_component_device_value(handle, driver.FULL)
        values.append(None if value is None else int_list(value))
        mapped.append([] if full is None else int_list(mapping[full.long()]))
    # each live request: (protected, SWA cursor, filled, its SWA slots, its match's branch)
    requests = {}
    for rid, request in driver.requests.items():
        if rid not in driver.live:
            continue
        kv = request.kv
        cursor = driver.swa_cursor(kv)
        start = max(kv.cache_protected_len, cursor)
        row = driver.rows.req_to_token[kv.req_pool_idx, start:request.filled].long()
        branch = request.swa_branching_seqlen
        requests[rid] = (int(kv.cache_protected_len), int(cursor),
                         int(request.filled), int_list(mapping[row]),
                         None if branch is None else int(branch))
    return {"values": values, "mapped": mapped, "requests": requests,
            "locks": _swa_locks(core, handles, driver.SWA),
            "free": _free(allocator.swa_attn_allocator),
            "available": int(allocator.swa_available_size()),
            "evictable": int(cache.swa_evictable_size()),
            "protected": int(cache.swa_protected_size())}


def _swa_locks(core, handles: list, swa) -> list[int] | None:
    """Each node's SWA lock count, where the core exposes its node objects (the Python core);
    None where it does not."""
    try:
        return [int(core.node_by_id(handle).component_data[swa].lock_ref) for handle in handles]
    except NotImplementedError:
        return None


def track(driver) -> dict[int, tuple]:
    """{node: (parent, path start, path end, children)} of every node on the path of a handle
    a call returned, each of them named by path from now on (`driver.paths`: a node a split
    made above a named one is named here, before a later op evicts the one below); a handle
    that is gone is forgotten. After every op, also where the state is not read whole (the
    twin's: `twin.py`)."""
    found: dict[int, tuple] = {}
    for handle, path in _paths(driver, list(driver.paths)):
        extra, tokens = driver.paths[handle]
        if path is None:  # evicted, or a tree before a reset
            del driver.paths[handle]
            continue
        for info in path:
            node = int(info.node_id)
            driver.paths.setdefault(node, (extra, tokens[:info.path_end]))
            found[node] = (int(info.parent_id), int(info.path_start), int(info.path_end),
                           children_of(info))
    return found


def tree_nodes(driver) -> tuple[list, list, list]:
    """The tree's nodes as a whole read has them (`_nodes`), for the driver's own reads."""
    return _nodes(driver)


def _nodes(driver) -> tuple[list, list, list]:
    """(extra_key, path tokens, parent index or -1, start, slots or None, children or None),
    parents first; each node's value tensor; each node's handle."""
    core, root = driver.tree_core, driver.root_handle()
    found = track(driver)
    order = sorted(found, key=lambda node: (found[node][2], node))
    index = {node: i for i, node in enumerate(order)}
    nodes, values = [], []
    for node in order:
        parent, start, end, children = found[node]
        extra, tokens = driver.paths[node]
        value = core.get_component_device_value(node, driver.FULL)
        values.append(value)
        nodes.append((index.get(parent, -1) if parent != root else -1, plain(extra),
                      list(tokens), start, None if value is None else int_list(value),
                      children))
    return nodes, values, order


def _paths(driver, handles: list) -> list[tuple]:
    """(handle, its path, or None where it is gone) for each handle: one `collect_path_info`
    call for them all where the core has it (a call a handle, each crossing into the core, was a
    fifth of a state read), else, or where one of them is gone (`KeyError`), one a handle."""
    core = driver.tree_core
    if handles and callable(getattr(core, "collect_path_info", None)):
        try:
            paths = core.collect_path_info(handles)
        except KeyError:
            paths = None
        if paths is not None and len(paths) == len(handles):
            return [(handle, list(path)) for handle, path in zip(handles, paths)]
    found = []
    for handle in handles:
        extra, tokens = driver.paths[handle]
        try:
            found.append((handle, path_info(driver, handle, tokens, extra)))
        except KeyError:
            found.append((handle, None))
    return found


def children_of(info) -> int | None:
    """The node's child count as the core reports it; None where the release's
    `TreePathNodeInfo` has no `num_children` (SGLang 0.5.22): then the judge's check that every
    child is a node some call named is not made (counting the named ones would only restate
    them), and the walk's check (every slot in a named node) still sees a hidden node that
    holds slots."""
    children = getattr(info, "num_children", None)
    return None if children is None else int(children)


def exposes_nodes(core, root) -> bool:
    """Whether the core shows its node objects (`node_by_id`; the Rust core raises
    `NotImplementedError`), asked of the root: asked only of the nodes a call named, an empty
    tree (the read before the first op) said "shown" on the Rust core too, and the judge then
    took the model's lock counts, not locked or not, for the Rust core's nodes after a light
    read (issue 21's false "lock baseline")."""
    try:
        core.node_by_id(root)
    except NotImplementedError:
        return False
    return True


def _inner(core, handles: list, root) -> list | None:
    """(edge key, key tokens, lock_ref, hit_count, priority, last_access_time, creation_time)
    of each node, where the core exposes its node objects; None where it does not. A field the
    nodes do not have is None (SGLang 0.5.11's keep no priority and no creation time)."""
    if not exposes_nodes(core, root):
        return None
    found = []
    for node in (core.node_by_id(handle) for handle in handles):
        edge = next((key for key, child in node.parent.children.items() if child is node), None)
        data = node.component_data[0]  # ComponentType.FULL
        priority, created = (getattr(node, name, None) for name in ("priority",
                                                                     "creation_time"))
        found.append((plain(edge), list(node.key), int(data.lock_ref), int(node.hit_count),
                      None if priority is None else int(priority),
                      float(node.last_access_time), None if created is None else float(created)))
    return found


def light(driver) -> dict:
    """The light read between two whole ones (`fuzz/radix/reads.py`): the sizes, the rows,
    the KV events since the last read, and digests, each the sum (mod 2**64) of one hash a row:
    of the KV-canary walk (every cached slot with its position and the slot before it), of the
    unlocked slots, and of the nodes as the whole read shows them (`node_digest`): what the
    judge's eviction and pin checks take from the model's nodes after a light read."""
    cache, core = driver.cache, driver.tree_core
    nodes, _, handles = _nodes(driver)  # (the nodes tracked by path, as after every read)
    inner = _inner(core, handles, driver.root_handle())
    walk = core.walk_for_kv_canary(False, False)
    rows = list(zip(int_list(walk.slot_indices), int_list(walk.positions),
                    int_list(walk.prev_slot_indices)))
    unlocked = int_list(core.walk_for_kv_canary(True, False).slot_indices)
    return {"walk": sum(map(hash, rows)) & MASK, "num_walk": len(rows),
            "unlocked": sum(map(hash, unlocked)) & MASK, "num_unlocked": len(unlocked),
            "nodes": node_digest(nodes, inner, set(unlocked)), "num_nodes": len(nodes),
            "inner": inner is not None, "absent": absent_fields(inner),
            "evictable": int(cache.evictable_size()), "protected": int(cache.protected_size()),
            "available": int(_pool(driver.allocator).available_size()),
            "total": [int(n) for n in cache.total_size()], "rows": rows_of(driver),
            "events": [event(e) for e in cache.take_events()]}


def absent_fields(inner: list | None) -> list[str]:
    """The node fields no node has (SGLang 0.5.11's nodes keep no priority and no creation
    time): the judge leaves them out of the model's side of the digest too (`exposed`)."""
    if not inner:
        return []
    return [name for name, at in (("priority", 4), ("created", 6))
            if all(row[at] is None for row in inner)]


def node_digest(nodes: list, inner: list | None, unlocked: set) -> int:
    """The sum (mod 2**64) of one hash a node over what the judge's node comparison reads of it
    (`fuzz/unified/state.py:views`): (namespace, path, key, slots, lock) and, where the core
    shows its node objects, (hit count, priority, the ranks of its access and creation times);
    the lock count where shown, else whether a slot of the node is locked (the walk). Ints only
    (a str's hash differs between processes); the judge computes the same of the model's nodes
    (`fuzz/unified/state.py:node_digest`)."""
    if inner is not None:
        access = {t: i for i, t in enumerate(sorted({row[5] for row in inner}))}
        created = {t: i for i, t in enumerate(sorted({row[6] for row in inner}))}
    total = 0
    for i, (_, extra, tokens, start, value, _) in enumerate(nodes):
        value = tuple(value or ())
        if inner is None:
            row = (namespace_int(extra), tuple(tokens), tuple(tokens[start:]), value,
                   int(bool(value) and not set(value) <= unlocked))
        else:
            _, key, lock, hits, priority, when, made = inner[i]
            row = (namespace_int(extra), tuple(tokens), tuple(key), value, lock, hits,
                   -1 if priority is None else priority, access[when], created[made])
        total += hash(row)
    return total & MASK


MASK = (1 << 64) - 1
