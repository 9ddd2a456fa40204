"""vLLM's `BlockPool` driven as the installed release has it: what an earlier release's pool
lacks (`unpin_blocks`, `is_block_writable`, token counts, hash units, masks, configurations) read
from its API and turned into preconditions, so that it gets only the traces it can take (moved
from tests/engine/test_released_api.py). No real earlier release is needed."""

from __future__ import annotations

import sys
from dataclasses import replace

from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.strategies.blockpool import profile as blockpool_profile
from kvfuzz.strategies.blockpool.trace import Unpin


def test_a_pool_without_unpin_blocks_gets_no_unpins():
    target = TARGETS["blockpool"]
    lacking = replace(target.catalogue.resolve("vllm.blockpool"),
                      preconditions=(blockpool_profile.NO_UNPIN,))
    declared = target.catalogue.declare(lacking, object)  # what `object` lacks: stated once
    assert declared.preconditions.count(blockpool_profile.NO_UNPIN) == 1
    traces = [target.generator.generate(0, index, [lacking]) for index in range(40)]
    assert not any(isinstance(op, Unpin) for trace in traces for op in trace.ops)
    usual = [target.generator.generate(0, index) for index in range(40)]
    with_unpins = [trace for trace in usual if any(isinstance(op, Unpin) for op in trace.ops)]
    assert with_unpins and target.check(with_unpins[0], lacking).status == "outside contract"


def test_a_pool_without_is_block_writable_is_read_without_that_check():
    # vLLM before 0.29 has no `BlockPool.is_block_writable`: the reader leaves that one view out
    # (None, which `pool_state` does not compare) instead of failing every trace on it.
    from types import SimpleNamespace

    from kvfuzz.impl.blockpool.driver import PoolReader

    blocks = [SimpleNamespace(block_id=i) for i in range(3)]
    old = PoolReader(SimpleNamespace(blocks=blocks), 3)
    assert old.writable() is None
    new = PoolReader(SimpleNamespace(blocks=blocks, is_block_writable=lambda b: b.block_id > 0),
                     3)
    assert new.writable() == [1, 2]


def test_blocks_that_keep_no_token_count_are_read_without_that_check():
    # vLLM 0.20's KVCacheBlock has no `block_hash_num_tokens` (an entry covers its whole block):
    # every manager trace crashed in the reader. The count is None and left out; where the
    # blocks keep it, a wrong count is still caught.
    from types import SimpleNamespace

    from kvfuzz.fuzz.blockpool.pool_state import _per_block
    from kvfuzz.impl.blockpool.driver import PoolReader

    class Old:
        def __init__(self, i):
            self.block_id, self.ref_cnt = i, 0

    class New(Old):
        block_hash_num_tokens = 4

    def reader(kind):
        blocks = [kind(i) for i in range(3)]
        return PoolReader(SimpleNamespace(blocks=blocks, null_block=blocks[0]), 3)

    assert reader(Old).hash_tokens() is None and reader(New).hash_tokens() == [4, 4, 4]
    # (no block holds a second entry: each block's entry is its primary key, `key`)
    model = SimpleNamespace(ref=[0, 0, 0], size=3, tokens=[4, 4, 4], entries=lambda b: None,
                            extra=[[], [], []], key=[None] * 3, writable=lambda: [])
    assert _per_block(model, [0, 0, 0], [None] * 3, None, None) == []
    assert _per_block(model, [0, 0, 0], [None] * 3, [4, 4, 4], None) == []
    wrong, = _per_block(model, [0, 0, 0], [None] * 3, [4, 3, 4], None)  # a wrong count: caught
    assert wrong[0] == "block hash tokens" and "block 1's entry" in wrong[1]


def test_a_pool_of_an_earlier_release_gets_only_the_configurations_it_takes():
    # vLLM 0.25's BlockPool: no lookahead hashing in its constructor, no replace_existing_hashes
    # in cache_partial_block (which asserts an entry strictly inside a block), no
    # move_block_hashes or emit_cached_block_events. Read from the class; its stream makes none.
    from kvfuzz.strategies.blockpool.profile import (NO_LOOKAHEAD, NO_MOVE, NO_REPLACE,
                                                     NO_REPORT)
    from kvfuzz.strategies.blockpool.trace import CachePartial, Move

    class OldPool:
        def __init__(self, num_gpu_blocks, enable_caching, hash_block_size,
                     enable_kv_cache_events=False, metrics_collector=None):
            pass

        def cache_partial_block(self, request, block, num_tokens, kv_cache_group_id,
                                block_size):
            pass

    target = TARGETS["blockpool"]
    entry = target.catalogue.resolve("vllm.blockpool")
    old = target.catalogue.declare(entry, OldPool)
    assert {NO_LOOKAHEAD, NO_MOVE, NO_REPLACE, NO_REPORT} <= set(old.preconditions)
    assert target.catalogue.declare(entry, type("New", (OldPool,), {
        "__init__": lambda self, num_hash_lookahead_tokens=0, **rest: None,
        "cache_partial_block": lambda self, *a, replace_existing_hashes=False: None,
        "cache_full_blocks": lambda self, *a, block_mask=None: None,
        "move_block_hashes": len, "emit_cached_block_events": len, "unpin_blocks": len,
    })) == entry  # today's shape: nothing declared
    traces = [target.generator.generate(0, index, [old]) for index in range(150)]
    assert "no-replace" in traces[0].origin.generator
    partials = [(op, t) for t in traces for op in t.ops if isinstance(op, CachePartial)]
    assert partials and not any(op.replace or op.units % t.scale == 0 for op, t in partials)
    assert not any(isinstance(op, Move) for t in traces for op in t.ops)
    assert not any(t.lookahead or t.report for t in traces)
    usual = [target.generator.generate(0, index, [entry]) for index in range(150)]
    for wanted, text in ((lambda t: t.lookahead, NO_LOOKAHEAD), (lambda t: t.report, NO_REPORT),
                         (lambda t: any(isinstance(op, Move) for op in t.ops), NO_MOVE),
                         (lambda t: any(isinstance(op, CachePartial) and op.replace
                                        for op in t.ops), NO_REPLACE)):
        trace = next(t for t in usual if wanted(t))
        assert text in target.judge.broken(trace, old.preconditions)


def test_a_pool_that_joins_hash_units_or_takes_no_mask_gets_one_unit_blocks_unmasked():
    # vLLM 0.20's BlockPool: a block of several hash units keyed by the units' hashes joined
    # (its module's BlockHashListWithBlockSize; 0.25 on, by the last unit's), and
    # cache_full_blocks without block_mask. Read from the class and its module.
    import sys
    import types

    from kvfuzz.strategies.blockpool.profile import NO_MASK, NO_SCALE
    from kvfuzz.strategies.blockpool.trace import Cache

    def module_with(get):
        module = types.ModuleType("kvfuzz_test_old_pool")
        module.BlockHashListWithBlockSize = type("Scaled", (), {
            "__init__": lambda self, hashes, unit, size: setattr(self, "h", (hashes, size)),
            "__getitem__": lambda self, i: get(*self.h, i)})
        pool = type("OldPool", (), {"__module__": module.__name__,
                                    "cache_full_blocks": lambda self, request, blocks: None})
        sys.modules[module.__name__] = module
        return pool

    target = TARGETS["blockpool"]
    entry = target.catalogue.resolve("vllm.blockpool")
    try:
        joined = target.catalogue.declare(entry, module_with(
            lambda hashes, size, i: b"".join(hashes[i * size:(i + 1) * size])))
        last = target.catalogue.declare(entry, module_with(
            lambda hashes, size, i: hashes[(i + 1) * size - 1]))
    finally:
        del sys.modules["kvfuzz_test_old_pool"]
    assert NO_SCALE in joined.preconditions and NO_SCALE not in last.preconditions
    assert NO_MASK in joined.preconditions and NO_MASK in last.preconditions
    traces = [target.generator.generate(0, index, [joined]) for index in range(150)]
    assert "no-scale, no-mask" in traces[0].origin.generator
    assert all(t.scale == 1 for t in traces)
    assert not any(isinstance(op, Cache) and op.skip for t in traces for op in t.ops)
    usual = [target.generator.generate(0, index, [entry]) for index in range(150)]
    assert NO_SCALE in target.judge.broken(next(t for t in usual if t.scale > 1),
                                           joined.preconditions)
    masked = next(t for t in usual if any(isinstance(op, Cache) and op.skip for op in t.ops))
    assert NO_MASK in target.judge.broken(masked, joined.preconditions)
