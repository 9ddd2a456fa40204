"""SGLang 0.5.11's `UnifiedRadixCache` has no tree core: its tree is `UnifiedTreeNode` objects of
its own (`cache.root_node`, each node's `children`, `parent`, `key`, `component_data[ct]` with
`value` and `lock_ref`, `last_access_time`, `hit_count`, `id`). `NodeTree` reads that tree with
the read calls the unified reader asks of a core (`reader.py`, `paths.py`), so the same state
read runs on it: a node's handle is its `id`, looked up by a walk from the current root (a
node that is gone raises `KeyError`, as a core's lookup does). Nothing here writes to the tree:
every call is a read of the nodes' fields, never a call of the cache's helpers (its
`_match_prefix_helper` splits nodes and stamps times).

What the class promises the scheduler that the oracle must follow (oracle/radix/contract.py) is
read from its module and its components' sources here (`contract_names`)."""

from __future__ import annotations

import inspect
import re
import sys
from typing import NamedTuple


class PathInfo(NamedTuple):
    """`TreePathNodeInfo` as 0.5.22's cores report it (the children counted from the node)."""
    node_id: int
    parent_id: int
    path_start: int
    path_end: int
    num_children: int


class Walk(NamedTuple):
    """`RadixCacheWalkResult`: every full-attention slot, its position, the slot before it, as
    int64 tensors (as the cores answer)."""
    slot_indices: object
    positions: object
    prev_slot_indices: object


class NodeTree:
    """The read calls of a unified tree core over a cache's own nodes (0.5.11)."""

    def __init__(self, cache, full):
        self.cache, self.FULL = cache, full

    # -- handles ------------------------------------------------------------------------------
    def handle(self, node) -> int:
        """A node object a call returned, as the handle the reads take (a handle as it is)."""
        return node if isinstance(node, int) else int(node.id)

    def root_node_handle(self) -> int:
        return int(self.cache.root_node.id)  # a reset makes a new root

    def _nodes(self) -> dict:
        """{id: node} of every node reachable from the current root."""
        found, stack = {}, [self.cache.root_node]
        while stack:
            node = stack.pop()
            if node.id in found:  # a cycle: the tree read would never end
                raise RuntimeError(f"node {node.id} is reached twice from the root")
            found[node.id] = node
            stack.extend(node.children.values())
        return found

    def node_by_id(self, handle):
        node = self._nodes().get(handle)
        if node is None:
            raise KeyError(handle)
        return node

    # -- the reads ----------------------------------------------------------------------------
    def get_component_device_value(self, handle, component):
        return self.node_by_id(handle).component_data[component].value

    def collect_path_info(self, handles) -> list[list[PathInfo]]:
        """Each node's path below the root, root first (`KeyError`: one is gone)."""
        nodes, root = self._nodes(), self.cache.root_node
        found = []
        for handle in handles:
            node = nodes.get(handle)
            if node is None:
                raise KeyError(handle)
            chain = []
            while node is not root:
                chain.append(node)
                node = node.parent
            path, end = [], 0
            for node in reversed(chain):
                start, end = end, end + len(node.key)
                path.append(PathInfo(int(node.id), int(node.parent.id), start, end,
                                     len(node.children)))
            found.append(path)
        return found

    def collect_full_device_indices(self, handle, root=None):
        import torch  # (the catalogue imports this module for `contract_names`: no torch)

        node, values = self.node_by_id(handle), []
        while node is not self.cache.root_node:
            values.append(node.component_data[self.FULL].value)
            node = node.parent
        return torch.cat(values[::-1]) if values else torch.empty(0, dtype=torch.int64)

    def match_full_device_prefix(self, key) -> tuple[int, int, int]:
        """(tokens matched by whole nodes, the deepest such node, how far they reach): a walk
        down the nodes' keys that splits nothing and stamps nothing."""
        page, node, matched = self.cache.page_size, self.cache.root_node, 0
        while len(key) > 0:
            child = node.children.get(key.child_key(page))
            if child is None or child.key.match(key, page_size=page) < len(child.key):
                break
            matched += len(child.key)
            key, node = key[len(child.key):], child
        return matched, int(node.id), matched

    def walk_for_kv_canary(self, unlocked_only: bool, swa_resident_only: bool = False) -> Walk:
        """As the cores' walk (0.5.20's `UnifiedTreeCore.walk_for_kv_canary`), full attention:
        depth first, a node's slots with their positions from the root and the slot before."""
        slots, positions, before = [], [], []
        stack = [(self.cache.root_node, 0, -1)]
        while stack:
            node, depth, last = stack.pop()
            data = node.component_data[self.FULL]
            # (the root's value is a plain [], as the cores' walk skips it)
            own = [int(s) for s in data.value.tolist()] if hasattr(data.value, "tolist") else []
            emit = node is not self.cache.root_node and not (unlocked_only and data.lock_ref)
            for j, slot in enumerate(own):
                if emit:
                    slots.append(slot)
                    positions.append(depth + j)
                    before.append(last if j == 0 else own[j - 1])
            below = depth + (len(own) if node is self.cache.root_node else len(node.key))
            stack.extend((child, below, own[-1] if own else last)
                         for child in node.children.values())
        import torch

        return Walk(*(torch.tensor(column, dtype=torch.int64)
                      for column in (slots, positions, before)))


class WalkOverCore:
    """A Python tree core of SGLang 0.5.17-0.5.19: its own read calls as they are, and the
    read-only walk it lacks (`match_full_device_prefix`, 0.5.20 on) read from its nodes
    (`root_node`, `children`, `key`, `id`) as `NodeTree` reads 0.5.11's."""

    def __init__(self, core, full):
        self.core, self._nodes = core, NodeTree(core, full)

    def __getattr__(self, name):
        return getattr(self.core, name)

    def match_full_device_prefix(self, key) -> tuple[int, int, int]:
        return self._nodes.match_full_device_prefix(key)


def walkable(core, full):
    """The core, or where it has no read-only walk but nodes to walk (0.5.17-0.5.19's Python
    core), the core with one (`WalkOverCore`)."""
    if callable(getattr(core, "match_full_device_prefix", None)) or \
            not hasattr(core, "root_node"):
        return core
    return WalkOverCore(core, full)


def has_own_nodes(cls) -> bool:
    """A unified cache of the old calls with no tree core (no `root_node_handle`): 0.5.11's."""
    return not callable(getattr(cls, "root_node_handle", None))


def contract_names(cls) -> tuple[str, ...]:
    """What such a class promises, read from its module's and components' sources (the names of
    oracle/radix/contract.py's `BY_NAME`): `lru_only` where nothing reads `eviction_policy`
    (one `UnifiedLRUList` a component), `no_hit_counts` where no node's `hit_count` is raised
    without HiCache (0.5.11: never; 0.5.12: for its write through alone; 0.5.13 on count them),
    `no_kv_events` where `take_events` is `BasePrefixCache`'s (it answers []),
    `no_lock_delta` where no component's `acquire_component_lock` sets the result's `delta`,
    `branches_before_match` where the Mamba component's branching point is the floored full hit
    wherever it is past 0 (`aligned_seqlen > 0`), not past the match."""
    module = sys.modules.get(getattr(cls, "__module__", ""))
    components = tuple(getattr(module, "COMPONENT_REGISTRY", {}).values())
    modules = dict.fromkeys([module] + [sys.modules.get(c.__module__) for c in components])
    text = "\n".join(_source(each) for each in modules)  # each module once: raises are counted
    names = []
    if "eviction_policy" not in text:
        names.append("lru_only")
    if not _counts_hits(cls, text):
        names.append("no_hit_counts")
    take = getattr(cls, "take_events", None)
    if getattr(take, "__qualname__", "").startswith("BasePrefixCache."):
        names.append("no_kv_events")
    if not any("delta" in _source(getattr(c, "acquire_component_lock", None))
               for c in components):
        names.append("no_lock_delta")
    if "aligned_seqlen if aligned_seqlen > 0" in text:
        names.append("branches_before_match")
    return tuple(names)


# 0.5.12 raises a node's hit count in `_inc_hit_count` alone, and only for HiCache's write
# through: it returns at once where the cache has no `cache_controller`, as kvfuzz builds it
# (0.5.13 on count the hit whatever, and return only under a write-back controller).
_HICACHE_ONLY = re.compile(r"if self\.cache_controller is None:\s*return\b")


def _counts_hits(cls, text: str) -> bool:
    """Whether a node's hit count rises in the cache kvfuzz builds (no HiCache): some raise of
    `hit_count` outside an `_inc_hit_count` that returns where there is no cache controller."""
    raises = text.count("hit_count +=") + text.count("hit_count = node.hit_count")
    gated = _source(getattr(cls, "_inc_hit_count", None))
    if _HICACHE_ONLY.search(gated):
        raises -= gated.count("hit_count +=")
    return raises > 0


def _source(obj) -> str:
    try:
        return inspect.getsource(obj) if obj is not None else ""
    except (OSError, TypeError):
        return ""
