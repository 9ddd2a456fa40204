"""Which blocks beside a Mamba "align" group (`fuzz/kvmanager/align_queue.py`): the free queue's
order and the blocks each group takes, predicted after every op of the reduced mode. Each test
double below breaks only the order (every count, table shape, reference count and hit the
other reduced checks judge stays right), and the check catches it; the rule itself
(`oracle/kvmanager/align_queue.py`) is tested without vLLM. Slow where it imports vLLM."""

import functools

import pytest

from kvfuzz.oracle.kvmanager.align_queue import (QueueModel, request_free, skipped_frees,
                                                 trim_null_head)
from kvfuzz.impl.registry import load_attribute
from kvfuzz.strategies.kvmanager import hybrid
from tests.helpers import divergence, with_engine


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, each breaking only which blocks (built on first use,
    never at collection)."""
    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class FreesFrontFirst(KVCacheManager):
        """`free(request)` gives each table front first: the tail blocks are no longer
        evicted (or reused) first."""
        def free(self, request):
            for manager in self.coordinator.single_type_managers:
                self.block_pool.free_blocks(manager.pop_blocks_for_free(request.request_id))

    class PopsFromTail(KVCacheManager):
        """Every `get_new_blocks` takes the free queue's last blocks (the least recently
        freed cached ones evicted last): the same counts, other blocks."""
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pool = self.block_pool
            get_new_blocks = pool.get_new_blocks

            def from_tail(num_blocks):
                queue = pool.free_block_queue
                if 0 < num_blocks <= queue.num_free_blocks:
                    blocks = queue.get_all_free_blocks()[::-1][:num_blocks]
                    for block in blocks:  # to the head, in the order they are taken
                        queue.remove(block)
                    queue.prepend_n(blocks)
                return get_new_blocks(num_blocks)
            pool.get_new_blocks = from_tail
    return {cls.__name__: cls for cls in (FreesFrontFirst, PopsFromTail)}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_align_queue:PopsFromTail
    if name in ("FreesFrontFirst", "PopsFromTail"):
        return doubles()[name]
    raise AttributeError(name)


# (broken, label, the first "mamba align" trace of seed 0 that catches it: the mutant's was 0
# until the profile drew EAGLE there, 2026-12-06; its corpus case is shrunk from that trace)
BROKEN = [("FreesFrontFirst", "free queue", 0), ("PopsFromTail", "which blocks", 0),
          ("mutant.vllm.kvmanager.mamba_align_skipped_front_first", "free queue", 13)]


def _impl(name: str) -> str:
    return name if name.startswith("mutant.") else f"{__name__}:{name}"


@with_engine("vllm")
@pytest.mark.parametrize("name, label, index", BROKEN,
                         ids=[n.rsplit(".", 1)[-1] for n, _, _ in BROKEN])
def test_only_the_queue_check_catches_a_wrong_order(name, label, index, monkeypatch):
    """Each broken order is caught on its "mamba align" trace by this check, and with the check
    off survives the profile's first 40 traces and that one: no other reduced check sees it."""
    from kvfuzz.fuzz.kvmanager.align import AlignLockstep

    found = divergence("kvmanager", hybrid.MAMBA_ALIGN.generate(0, index), _impl(name))
    assert found is not None and found.what.startswith(label), found
    monkeypatch.setattr(AlignLockstep, "queue_problems", lambda *args: [])
    assert not any(divergence("kvmanager", hybrid.MAMBA_ALIGN.generate(0, i), _impl(name))
                   for i in range(40))


# -- the rule, without vLLM -----------------------------------------------------------------
def test_frees_prepend_uncached_and_append_cached_in_the_order_given():
    cached = {5, 7}
    model = QueueModel([1, 2], [0, 0, 0, 1, 1, 1, 1, 1, 2], cached.__contains__)
    model.free([3, 5, 4, 7, 8, 0])  # (8: a reference left; 0: the null block, skipped)
    assert model.queue == [3, 4, 1, 2, 5, 7] and model.ref[8] == 1


def test_pops_take_the_head_and_evict_the_cached_touches_remove_anywhere():
    model = QueueModel([4, 2, 6, 1], [0] * 7, {2}.__contains__)
    model.touch([6, 0])
    assert model.queue == [4, 2, 1] and model.ref[6] == 1
    assert model.pop(2) == [4, 2] and model.queue == [1] and model.evicted == [2]
    assert model.ref[4] == model.ref[2] == 1


def test_a_request_free_goes_group_by_group_last_block_first():
    model = QueueModel([9], [0, 1, 1, 1, 1, 1, 1, 0, 0, 0], lambda block: False)
    request_free(model, [[1, 2, 3], [0, 0, 4, 0, 5, 6]], [0, 1])
    assert model.queue == [6, 5, 4, 3, 2, 1, 9]
    model = QueueModel([9], [0, 1, 1, 1, 1, 1, 1, 0, 0, 0], lambda block: False)
    request_free(model, [[1, 2, 3], [0, 0, 4, 0, 5, 6]], [1, 0])  # (full attention last)
    assert model.queue == [3, 2, 1, 6, 5, 4, 9]
    assert trim_null_head([0, 0, 4, 0, 5]) == [4, 0, 5]


def test_skipped_frees_are_the_nulled_positions_last_first_scratch_blocks_moved_not_freed():
    # states at 1 and 3 nulled; the scratch block 7 (speculative 1) relocated to the end
    assert skipped_frees([0, 2, 0, 3, 5, 7], [0, 0, 0, 0, 5, 0, 7, 8], 1) == [3, 2]
    assert skipped_frees([0, 2, 5], [0, 2, 5, 6], 0) == []


# (profile alone, index of seed 0, double, label): a connector's admission (its external
# blocks taken before the new ones) and a Mamba group ordered before full attention's
OTHERS = [("mamba connector", 0, "PopsFromTail", "which blocks"),
          ("full last", 4, "FreesFrontFirst", "free queue")]


@with_engine("vllm")
@pytest.mark.parametrize("profile, index, name, label", OTHERS, ids=[o[0] for o in OTHERS])
def test_the_other_align_profiles_are_judged_too(profile, index, name, label):
    from kvfuzz.strategies.kvmanager import streams

    trace = streams.ALONE[profile].generate(0, index)
    assert trace.mamba_mode == "align"
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, _impl(name))
    assert found is not None and found.what.startswith(label), found
