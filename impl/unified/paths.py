"""A node's path, root first, as the tree core reports it: `collect_path_info([node])` where the
core has it (SGLang 0.5.22 on), else the same facts read through what SGLang 0.5.20 and 0.5.21's
cores have, for both cores alike:

- where the path ends: the length of `collect_full_device_indices(node, root)` (its slots);
- where the node starts: that less the length of its own full-attention value;
- its parent: `match_full_device_prefix` of the path's tokens up to that start, a read-only walk
  (no split, no time stamped) whose deepest node ends exactly there, or the root at 0.

The tokens of the path come from the call that returned the node (`UnifiedDriver.paths`). A
handle that is gone raises `KeyError`, as `collect_path_info` does."""

from __future__ import annotations

from array import array
from typing import NamedTuple


class PathNodeInfo(NamedTuple):
    """`TreePathNodeInfo` without `num_children`, which these releases do not report."""
    node_id: int
    parent_id: int
    path_start: int
    path_end: int


def path_info(driver, node, tokens, extra) -> list:
    """The nodes from below the root down to `node` (`tokens`: its path's, or longer)."""
    core, root = driver.tree_core, driver.root_handle()
    if callable(getattr(core, "collect_path_info", None)):
        return list(core.collect_path_info([node])[0])
    found, end = [], _path_len(core, node, root)
    while node != root:
        value = _value(core, node, driver.FULL)
        start = end - len(value)
        parent = root
        if start > 0:
            matched, parent, reaches = core.match_full_device_prefix(
                driver.Key(array("q", tokens[:start]), extra))
            if (matched, reaches) != (start, start):  # never on a well-formed tree
                raise RuntimeError(f"node {node}: no node of the tree ends at its start "
                                   f"{start} (the walk matched {matched}, to {reaches})")
        found.append(PathNodeInfo(int(node), int(parent), start, end))
        node, end = parent, start
    return found[::-1]


def _path_len(core, node, root) -> int:
    try:
        return len(core.collect_full_device_indices(node, root))
    except (KeyError, IndexError, ValueError, RuntimeError) as error:
        raise KeyError(node) from error  # gone: as collect_path_info says it


def _value(core, node, full):
    value = core.get_component_device_value(node, full)
    if value is None:
        raise KeyError(node)
    return value
