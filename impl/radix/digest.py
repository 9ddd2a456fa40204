"""A prefix cache's light read: what the judge checks after an op between two whole reads
(`reader.snapshot`, every few ops and after the last): the size counters, the live rows and one
int, a digest of every node, so that a change anywhere in the tree (off the op's path too) shows
in the op that made it.

The digest is the sum (mod 2**64) of one hash per node over ints only (a str's hash differs
between processes): (namespace, where its key starts, its edge as (namespace, first page), key,
slots, lock, hit count, priority, the ranks of its access and creation times). A sum, so that
the order nodes are walked in (each cache's own) does not matter; the judge computes the same
from the model's nodes (`fuzz/radix/state.py:view_digest`). The KV events published since the
last read are taken too, as the whole read takes them."""

from __future__ import annotations

from kvfuzz.impl.radix.ints import int_list
from kvfuzz.impl.radix.reader import event, rows_of

MASK = (1 << 64) - 1


def namespace_int(extra_key) -> int:
    """The driver's namespace of an `extra_key` ("ns<k>": k; None: 0; anything else: -1)."""
    if extra_key is None:
        return 0
    text = str(extra_key)
    return int(text[2:]) if text.startswith("ns") and text[2:].isdigit() else -1


def edge_ints(raw) -> tuple:
    """An edge key as (namespace, first page), ints only; (-2,) where it is no such key."""
    if isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[0], str):
        inner = edge_ints(raw[1])
        return inner if inner == (-2,) else (namespace_int(raw[0]), inner[1])
    if type(raw) is int:
        return 0, (raw,)
    if isinstance(raw, tuple) and all(type(t) is int for t in raw):
        return 0, raw
    return (-2,)


def node_rows(cache, most: int) -> list[tuple]:
    """(namespace, start, edge, key, slots, lock, hits, priority, access, created) of every
    node, read the way `reader._nodes` reads them (the key's own token array, cut to its
    limit, instead of iterating the key)."""
    found = []
    stack = [(edge, child, 0) for edge, child in cache.root_node.children.items()]
    while stack:
        edge, node, start = stack.pop()
        if len(found) >= most:
            raise RuntimeError(f"more than {most} nodes under the root: a cycle?")
        key, value = node.key, node.value
        tokens, limit = key.token_ids, getattr(key, "limit", None)  # (0.5.11's has no limit)
        tokens = tuple(tokens if limit is None or limit >= len(tokens) else tokens[:limit])
        found.append((namespace_int(key.extra_key), start, edge_ints(edge), tokens,
                      tuple(int_list(value)) if value is not None else (), int(node.lock_ref),
                      int(node.hit_count), int(node.priority), float(node.last_access_time),
                      float(node.creation_time)))
        end = start + len(tokens)
        stack.extend((e, child, end) for e, child in node.children.items())
    return found


def digest(rows: list[tuple]) -> int:
    """The sum of each node's hash, its times replaced by their ranks among the nodes'."""
    access = {t: i for i, t in enumerate(sorted({row[8] for row in rows}))}
    created = {t: i for i, t in enumerate(sorted({row[9] for row in rows}))}
    total = 0
    for row in rows:
        total += hash(row[:8] + (access[row[8]], created[row[9]]))
    return total & MASK


def light(driver) -> dict:
    cache = driver.cache
    rows = node_rows(cache, driver.rows.req_to_token.shape[1] * 64 + 64)
    return {"digest": digest(rows), "num_nodes": len(rows),
            "evictable": int(cache.evictable_size()), "protected": int(cache.protected_size()),
            "available": int(driver.allocator.available_size()), "rows": rows_of(driver),
            "events": [event(e) for e in cache.take_events()]}
