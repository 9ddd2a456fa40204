"""The declared equivalent mutants of vLLM's `FreeKVCacheBlockQueue` checked against their reasons
(`impl/equivalent_mutants.json`): on seeded series of the calls `BlockPool` makes (pops of any
count, 0 included, appends, prepends, removals from the middle, on queues of 1 to 12 blocks) each
answers and links its blocks exactly as the released queue does; and the comparison can see a
difference: a mutant that is not declared (a popped block keeping its back link) differs.
Skips without vLLM."""

from __future__ import annotations

import random

import pytest

from tests.helpers import mutant_module, needs_engine

pytestmark = needs_engine("vllm")  # (the slow tier)
MODULE = "vllm.v1.core.kv_cache_utils"
DECLARED = ("297:57:ReplaceUnaryOperator_USub_Invert:2", "297:57:ReplaceUnaryOperator_USub_Not:2",
            "298:58:NumberReplacer:38", "299:32:ReplaceComparisonOperator_Gt_NotEq:1",
            "299:34:NumberReplacer:41", "357:13:ReplaceComparisonOperator_Eq_Lt:2",
            "357:13:ReplaceComparisonOperator_Eq_LtE:2", "357:16:NumberReplacer:55",
            "358:12:RemoveStatement:74", "359:8:RemoveStatement:75",
            "363:13:ReplaceComparisonOperator_Eq_Lt:3", "363:16:NumberReplacer:57")


def compiled(mutant_id: str):
    """The queue class of a mutant's module, beside the released one."""
    return mutant_module(MODULE, mutant_id).FreeKVCacheBlockQueue


def named(queue, block):
    """A link as a caller can tell it: a block's id, or which end of the queue (by identity)."""
    return ("head" if block is queue.fake_free_list_head else
            "tail" if block is queue.fake_free_list_tail else
            None if block is None else block.block_id)


def history(cls, seed: int) -> list:
    """What a seeded series of calls answers, and the queue's order, count and every block's
    links after each."""
    from vllm.v1.core.kv_cache_utils import KVCacheBlock

    rng = random.Random(seed)
    blocks = [KVCacheBlock(i) for i in range(rng.randint(1, 12))]  # BlockPool: at least one
    queue, held, seen = cls(blocks), [], []
    for _ in range(60):
        roll = rng.random()
        if roll < 0.4:
            popped = queue.popleft_n(rng.randint(0, queue.num_free_blocks))
            held += popped
            seen.append([block.block_id for block in popped])
        elif roll < 0.7 and held:
            cut = rng.randint(0, len(held))
            back, held[:] = held[:cut], held[cut:]
            (queue.append_n if rng.random() < 0.5 else queue.prepend_n)(back)
        elif queue.num_free_blocks:
            block = rng.choice(queue.get_all_free_blocks())
            queue.remove(block)  # a prefix hit on a free cached block (BlockPool.touch)
            held.append(block)
        seen.append(([block.block_id for block in queue.get_all_free_blocks()],
                     queue.num_free_blocks,
                     [(named(queue, b.prev_free_block), named(queue, b.next_free_block))
                      for b in blocks]))
    return seen


@pytest.fixture(scope="module")
def released():
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import(MODULE):
        from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue
    return FreeKVCacheBlockQueue


@pytest.mark.parametrize("mutant", DECLARED)
def test_a_declared_mutant_does_what_the_release_does(released, mutant):
    from kvfuzz.fuzz.engine.mutation.run import declared_equivalents

    assert declared_equivalents().get(f"{MODULE}:{mutant}")  # declared, with its reason
    edited = compiled(f"{MODULE}:{mutant}")
    for seed in range(150):
        assert history(released, seed) == history(edited, seed), seed


def test_the_comparison_tells_a_mutant_that_is_not_equivalent(released):
    """popleft_n's loop leaving each popped block's back link (killed by kvfuzz's check that a
    block off the queue keeps no link): the comparison above sees it."""
    edited = compiled(f"{MODULE}:381:12:RemoveStatement:90")
    assert any(history(released, seed) != history(edited, seed) for seed in range(20))
