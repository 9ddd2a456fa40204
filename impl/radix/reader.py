"""The state of a prefix cache with SGLang `RadixCache`'s structures, read the way a debugger would
after every call, as plain data: every node (its parent, the edge key its parent files it under,
its key, slots, lock and hit counts, priority and times), the size counters, the allocator's free
pages, the live requests' rows, the KV events published since the last read, and which tensors
share memory (a tree value that aliases another node, a row, or a tensor the caller passed)."""

from __future__ import annotations

from kvfuzz.impl.driver_calls import staged_of
from kvfuzz.impl.radix.ints import EXACT_TENSOR, int_list, row_lists


def snapshot(driver) -> dict:
    cache, allocator = driver.cache, driver.allocator
    pool = getattr(driver, "free_pool", None) or allocator  # a pure-SWA allocator's one pool
    nodes, values = _nodes(cache, driver.rows.req_to_token.shape[1] * 64 + 64)
    return {"nodes": nodes, "evictable": int(cache.evictable_size()),
            "protected": int(cache.protected_size()),
            "available": int(allocator.available_size()),
            "free": int_list(pool.free_pages) + staged_of(pool),
            "rows": rows_of(driver), "events": [event(e) for e in cache.take_events()],
            "aliases": aliases(values, driver)}


def rows_of(driver) -> dict:
    """Each live request's row, [0, filled), as plain data (the radix and unified readers')."""
    return row_lists(driver.rows.req_to_token, {rid: (r.kv.req_pool_idx, r.filled)
                                                for rid, r in driver.requests.items()
                                                if rid in driver.live})


def _nodes(cache, most: int) -> tuple[list, list]:
    """(node, parent index or -1, edge, extra_key, key tokens, slots, lock_ref, hit_count,
    priority, last_access_time, creation_time), parents first; and each node's value tensor."""
    found, tensors = [], []
    stack = [(edge, child, -1) for edge, child in cache.root_node.children.items()]
    while stack:
        edge, node, parent = stack.pop()
        if len(found) >= most:
            raise RuntimeError(f"more than {most} nodes under the root: a cycle?")
        value = node.value
        found.append((parent, plain(edge), node.key.extra_key, list(node.key),
                      int_list(value) if value is not None else None, int(node.lock_ref),
                      int(node.hit_count), int(node.priority), float(node.last_access_time),
                      float(node.creation_time)))
        tensors.append(value)
        stack.extend((e, child, len(found) - 1) for e, child in node.children.items())
    return found, tensors


def plain(key):
    if isinstance(key, (int, str)) or key is None:
        return key
    if isinstance(key, tuple):
        return tuple(plain(part) for part in key)
    return repr(key)[:80]


def event(raw) -> tuple:
    """A KV event as plain data: ("stored", hashes, parent, tokens, block_size), ("removed",
    hashes), ("cleared",) or (its class name,)."""
    kind = type(raw).__name__
    if kind == "BlockStored":
        return ("stored", [int(h) for h in raw.block_hashes],
                None if raw.parent_block_hash is None else int(raw.parent_block_hash),
                [int(t) for t in raw.token_ids], int(raw.block_size))
    if kind == "BlockRemoved":
        return ("removed", [int(h) for h in raw.block_hashes])
    if kind == "AllBlocksCleared":
        return ("cleared",)
    return (kind,)


def _span(tensor) -> tuple[int, int] | None:
    """The bytes a tensor's elements occupy, [start, end)."""
    if type(tensor) is EXACT_TENSOR and tensor.is_contiguous():  # most: no stride sum (as below)
        size = tensor.numel() * tensor.element_size()
        start = tensor.data_ptr()
        return (start, start + size) if size else None
    if tensor is None or not hasattr(tensor, "data_ptr") or tensor.numel() == 0:
        return None
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    start = tensor.data_ptr()
    return start, start + (last + 1) * tensor.element_size()


def aliases(values: list, driver) -> list[tuple]:
    """Pairs of overlapping memory, each side ("node", index), ("rows",) or ("caller", k)."""
    spans = [(span, ("node", i)) for i, value in enumerate(values)
             if (span := _span(value)) is not None]
    spans += [(span, ("caller", k)) for k, tensor in enumerate(driver.passed)
              if (span := _span(tensor)) is not None]
    if (span := _span(driver.rows.req_to_token)) is not None:
        spans.append((span, ("rows",)))
    spans.sort()
    found, reach, holder = [], None, None
    for (start, end), who in spans:
        if reach is not None and start < reach and "node" in (who[0], holder[0]):
            found.append((holder, who))
            if len(found) >= 4:
                break
        if reach is None or end > reach:
            reach, holder = end, who
    return found
