"""The released vLLM `BlockPool` (vllm 0.33.0) through the lock step: 2,000 seeded traces run to
their last op, the corpus replays clean on it, and an outside class of the wrong shape is refused
in one line before anything runs. Skips without vLLM."""

import functools
from itertools import islice
from dataclasses import replace

import pytest

from kvfuzz.fuzz.blockpool.target import BLOCKPOOL
from kvfuzz.fuzz.engine.target import AGREE, OUTSIDE_CONTRACT
from kvfuzz.impl.blockpool import RELEASED
from kvfuzz.impl.registry import ImplementationError, load_attribute
from kvfuzz.strategies.blockpool.trace import (Alloc, Cache, CachePartial, DoubleFree, Free,
                                               Lookup, Move, Pin, Reset, Share, Trace, Unpin)
from tests.bars import bar
from tests.helpers import (assert_corpus_replays_clean, assert_refused_in_one_line,
                           assert_seeded_traces_agree, divergence, needs_engine, undeclared)

pytestmark = needs_engine("vllm")
VLLM = BLOCKPOOL.catalogue.resolve("vllm.blockpool")


def not_a_class(num_gpu_blocks, enable_caching, hash_block_size):
    """A function where the target calls a class."""


class MissingMethods:
    """A pool that cannot be touched or unpinned."""

    def __init__(self, num_gpu_blocks, enable_caching, hash_block_size):
        pass

    def get_new_blocks(self, num_blocks):
        return []


class WrongConstructor:
    """SGLang's allocator shape: (size, device), not BlockPool's keywords."""

    def __init__(self, size, device):
        pass


for _name in ("get_new_blocks", "touch", "free_blocks", "cache_full_blocks", "get_cached_block",
              "evict_blocks", "reset_prefix_cache", "get_num_free_blocks", "unpin_blocks"):
    setattr(WrongConstructor, _name, lambda self, *args: None)


@pytest.mark.slow  # 2,000 seeded traces (issue 24), in shards that pytest -n spreads
@pytest.mark.parametrize("shard", range(bar(8)))  # CI: the first quarter (`tests/bars.py`)
def test_every_seeded_trace_runs_to_its_last_op_on_vllm(shard):
    assert BLOCKPOOL.catalogue.resolve(RELEASED) is VLLM
    assert_seeded_traces_agree("blockpool", VLLM, range(shard * 250, (shard + 1) * 250))


def test_the_corpus_replays_clean_on_vllm():
    assert assert_corpus_replays_clean("blockpool", VLLM) >= 3


@pytest.mark.parametrize("attr, shows", [
    ("not_a_class", "is a function, not a class"),
    ("MissingMethods", "has no method touch, free_blocks"),
    ("WrongConstructor", "cannot be called with 0 positional arguments and num_gpu_blocks, "
                         "enable_caching, hash_block_size"),
])
def test_an_outside_class_of_the_wrong_shape_is_one_line(attr, shows):
    assert_refused_in_one_line("blockpool", f"{__name__}:{attr}", shows,
                               "vLLM BlockPool's interface")


# Faults no source mutant makes, for the checks only they can fail: a broken link in the free
# queue, a block handed out that keeps a link into it, its readers (`iter_blocks_after`,
# `get_all_free_blocks`) disagreeing with its links, a watcher never told of a reuse, a null block
# that is not block 0. Subclasses of the released class, so built on first use (never at
# collection).
@functools.cache
def doubles() -> dict:
    BlockPool = load_attribute("vllm.v1.core.block_pool:BlockPool")

    class BrokenLinks(BlockPool):
        """Frees correctly, then loses a back link in the free queue."""

        def free_blocks(self, ordered_blocks):
            super().free_blocks(ordered_blocks)
            first = self.free_block_queue.fake_free_list_head.next_free_block
            if first is not self.free_block_queue.fake_free_list_tail:
                first.prev_free_block = None

    class SkippingReader(BlockPool):
        """Keeps its free queue right, but its `iter_blocks_after` passes over the first block
        after the cursor (what a simple-offloading scan from a cursor would miss)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            walk = self.free_block_queue.iter_blocks_after
            self.free_block_queue.iter_blocks_after = lambda cursor: islice(walk(cursor), 1, None)

    class StaleNext(BlockPool):
        """Hands out blocks that keep their link to the next free block."""

        def get_new_blocks(self, num_blocks):
            following = [block.next_free_block for block in
                         self.free_block_queue.iter_blocks_after(None)][:num_blocks]
            blocks = super().get_new_blocks(num_blocks)
            for block, after in zip(blocks, following):
                block.next_free_block = after
            return blocks

    class StaleCensus(BlockPool):
        """Its free queue's `get_all_free_blocks()` leaves out the last free block."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            census = self.free_block_queue.get_all_free_blocks
            self.free_block_queue.get_all_free_blocks = lambda: census()[:-1]

    class DeafWatcher(BlockPool):
        """Hands unpinned blocks out again without telling their watcher."""

        def _notify_reuse(self, blocks):
            pass

    class NullNotZero(BlockPool):
        """Reserves the last block as its null block instead of block 0."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.null_block = self.blocks[-1]

    class Unmetered(BlockPool):
        """Drops the residency metrics collector it was given."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.metrics_collector = None
    class BoundaryAsserting(BlockPool):
        """vLLM 0.30's and 0.31's refusal: a non-replacing partial entry strictly inside a block."""

        def cache_partial_block(self, request, block, num_tokens, kv_cache_group_id,
                                block_size, replace_existing_hashes=False):
            assert replace_existing_hashes or (
                block_size > self.hash_block_size and num_tokens % block_size != 0)
            return super().cache_partial_block(request, block, num_tokens, kv_cache_group_id,
                                               block_size, replace_existing_hashes)

    class BoundaryRefusing(BoundaryAsserting):
        """The same refusal, in code the declaration does not read (a call of its parent)."""

        def cache_partial_block(self, *args, **kwargs):
            return super().cache_partial_block(*args, **kwargs)
    return {cls.__name__: cls for cls in (BrokenLinks, SkippingReader, StaleNext, StaleCensus,
                                          DeafWatcher, NullNotZero, Unmetered, BoundaryAsserting,
                                          BoundaryRefusing)}


def __getattr__(name):  # the doubles by import path: tests.blockpool.test_upstream:BrokenLinks
    if name in ("BrokenLinks", "SkippingReader", "StaleNext", "StaleCensus", "DeafWatcher",
                "NullNotZero", "Unmetered", "BoundaryAsserting", "BoundaryRefusing"):
        return doubles()[name]
    if name == "Undeclared":
        return undeclared(RELEASED)
    raise AttributeError(name)


@pytest.mark.parametrize("attr, ops, label", [
    ("BrokenLinks", (Alloc(1, 2), Free((1,))), "free queue links"),
    ("SkippingReader", (Alloc(1, 1),), "free queue links"),
    ("StaleNext", (Alloc(1, 1),), "free queue links"),
    ("StaleCensus", (Alloc(1, 1),), "free queue links"),
    ("DeafWatcher", (Alloc(1, 2), Unpin((1,)), Alloc(2, 2)), "reuse watcher"),
    ("NullNotZero", (Alloc(1, 1),), "null block"),
    ("Unmetered", (Alloc(1, 1),), "residency metrics"),
])
def test_checks_no_mutant_reaches_catch_their_fault(attr, ops, label):
    trace = Trace(4, True, ops, metrics=True)
    found = divergence("blockpool", trace, f"{__name__}:{attr}")
    assert found is not None and found.what.startswith(label), found and found.report()
    assert BLOCKPOOL.check(trace, VLLM).status == AGREE


def test_a_pool_that_asserts_entries_inside_a_block_gets_none_on_a_boundary():
    """vLLM 0.30 and 0.31 take replace_existing_hashes but assert a non-replacing partial entry
    strictly inside a block: read from the source (no signature shows it), a precondition its
    stream keeps (docs/release-history.md). The same refusal where the source is not read is
    a crash on the one trace the declaration leaves out."""
    from kvfuzz.strategies.blockpool.profile import NO_BOUNDARY

    # Read as the released class is (its entry's preconditions kept), without a process apart.
    declared, hidden = (BLOCKPOOL.catalogue.declare(replace(VLLM, path=f"{__name__}:{name}"),
                                                    doubles()[name])
                        for name in ("BoundaryAsserting", "BoundaryRefusing"))
    assert NO_BOUNDARY in declared.preconditions and NO_BOUNDARY not in hidden.preconditions
    boundary = Trace(4, True, (Alloc(1, 2), CachePartial(1, 4, tuple(range(5, 13)))), scale=4)
    assert BLOCKPOOL.check(boundary, declared).status == OUTSIDE_CONTRACT
    assert BLOCKPOOL.check(boundary, VLLM).status == AGREE
    found = divergence("blockpool", boundary, hidden)
    assert found is not None and "AssertionError" in found.report(), found
    traces = [BLOCKPOOL.generator.generate(0, index, [declared]) for index in range(40)]
    assert "no-boundary" in traces[0].origin.generator
    partials = [(op, t) for t in traces for op in t.ops if isinstance(op, CachePartial)]
    assert partials and all(op.replace or op.units % t.scale for op, t in partials)
    assert any(op.replace for op, _ in partials)  # replacing ones still go anywhere
    for trace in traces[:3]:
        outcome = BLOCKPOOL.check(trace, declared)
        assert outcome.status == AGREE, outcome.divergence and outcome.divergence.report()


def test_every_configuration_runs_clean_on_one_hand_made_trace():
    """Blocks of four 2-token units, KV events with a salt, an image and lookahead tokens,
    reported hits, metrics: partial entries (a longer one superseding, a partial hit), a copy,
    a promotion, a masked block, a reset."""
    ops = (Alloc(1, 2), CachePartial(1, 1, (5, 6, 7)), CachePartial(1, 3, (5, 6, 7, 8)),
           Lookup(2, (5, 6, 7, 9)), Move(1, 0, 3), Cache(1, (5, 6, 7, 8, 9, 10, 11, 12), 0, (1,)),
           Free((1, 2, 3)), Reset())
    trace = Trace(6, True, ops, hash_block_size=2, scale=4, events=True, lookahead=2, salt=True,
                  report=True, images=((1, 3),), metrics=True)
    outcome = BLOCKPOOL.check(trace, VLLM)
    assert outcome.status == AGREE, outcome.divergence and outcome.divergence.report()
    for event in ("lookup partial hit", "partial entry supersedes a shorter one",
                  "move entries to a copy", "cache with a block mask", "events published",
                  "config: images", "config: residency metrics"):
        assert outcome.features[event], event


def test_a_block_named_twice_once_per_reference_is_freed_alike():
    """What the 0.33.0 pool gets right: a pinned request (each block held twice), and two
    holders of one block, freed in one call."""
    ops = (Alloc(1, 3), Cache(1, (5, 6, 7)), Pin(1), Share(2, 1, 2), Free((1, 2)), Alloc(3, 3))
    assert BLOCKPOOL.check(Trace(5, True, ops), VLLM).status == AGREE
    dedups = BLOCKPOOL.catalogue.resolve("mutant.vllm.blockpool.free_dedups")
    found = divergence("blockpool", Trace(5, True, ops[:3] + ops[4:5]), dedups)
    assert found is not None and "num free" in found.report(), found and found.report()


def test_a_double_free_is_outside_vllms_contract_and_undeclared_it_is_reported():
    """vLLM's free_blocks does not check a double free: ref_cnt goes to -1 and the block is on
    the free queue (docs/upstream-vllm.md). Its entry declares that its callers never do it."""
    trace = Trace(4, True, (Alloc(1, 2), DoubleFree(1), Alloc(2, 3)))
    assert BLOCKPOOL.check(trace, VLLM).status == OUTSIDE_CONTRACT
    assert not any(isinstance(op, DoubleFree) for index in range(20) for op in
                   BLOCKPOOL.generator.generate(0, index, [VLLM]).ops)
    found = divergence("blockpool", trace, f"{__name__}:Undeclared")
    report = found.report()
    assert found.what.startswith("double free at op 1"), report
    assert "block 2 named 2 times with 1 reference(s)" in report, report
    assert "negative reference counts: block 2 has -1" in report, report
