"""A pool's whole state against the block-pool model's: free count, the free queue (order and
links), reference counts, hashes, the hash map, and the invariants (`state_violations`). Both
vLLM targets judge their pool with it: `blockpool` the pool it drives, `kvmanager` the manager's.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import crash_problems, guarded, list_diff
from kvfuzz.oracle.blockpool.model import BlockPoolModel, state_violations


def pool_problems(impl, model: BlockPoolModel, where: str) -> list[tuple[str, str]]:
    """What differs between a pool's state (read through `impl`, an `impl.blockpool.driver.
    PoolReader`) and the model's, and which invariants it breaks."""
    state, raised = guarded(lambda: (impl.num_free(), impl.free_queue(), impl.ref_counts(),
                                     impl.keys(), impl.cache_map(), impl.null_block()))
    if raised:
        return crash_problems(raised, where)
    num_free, (queue, links), ref, keys, cache, null = state
    problems = []
    if null != 0:
        problems.append(("null block", f"expected block 0, actual block {null}"))
    if links:
        problems.append(("free queue links", links))
    if num_free != model.num_free():
        problems.append(("num free", f"expected {model.num_free()}, actual {num_free}"))
    if queue != model.free:
        problems.append(("free queue", list_diff(model.free, queue)))
    if len(ref) != model.size or len(keys) != model.size:
        return problems + [("blocks", f"expected {model.size} blocks, actual {len(ref)}")]
    wrong = [b for b in range(1, model.size) if ref[b] != model.ref[b]]
    if wrong:
        b = wrong[0]
        problems.append(("ref_cnt", f"block {b}: expected {model.ref[b]}, actual {ref[b]} "
                                    f"({len(wrong)} blocks differ)"))
    wrong = [b for b in range(model.size) if keys[b] != model.key[b]]
    if wrong:
        b = wrong[0]
        problems.append(("block hash", f"block {b}: expected {_key(model.key[b])}, actual "
                                       f"{_key(keys[b])} ({len(wrong)} blocks differ)"))
    if cache != model.map:
        key = next(k for k in sorted(set(cache) | set(model.map))
                   if cache.get(k) != model.map.get(k))
        problems.append(("hash map", f"{_key(key)}: expected blocks {model.map.get(key)}, "
                                     f"actual {cache.get(key)}"))
    plain = [k if not isinstance(k, list) else k[0] for k in keys]
    found = state_violations(model.size, ref, queue, plain, cache)
    return problems + [("invariant", text) for text in found]


def _key(key) -> str:
    if key is None:
        return "no hash"
    if isinstance(key, list):
        return " and ".join(_key(k) for k in key)
    return f"hash {key[0]} group {key[1]}"
