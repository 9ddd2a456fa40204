"""The pool's state read after every op (`PoolReader.pool_state`, one pass over the blocks for
the counts, entries, token counts and links) answers what the pool's separate readers answer,
on the states seeded traces of the block pool and of the manager pass through, and on a pool
that keeps a stale link; a one-pass read that drops a part is caught. Skips without vLLM."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.blockpool.target import BLOCKPOOL
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.impl.blockpool import driver
from tests.helpers import needs_engine

pytestmark = needs_engine("vllm")


def _separately(reader) -> dict:
    """The parts the one-pass read covers, each read by its own method."""
    queue, links = reader.free_queue()
    return {"ref": reader.ref_counts(), "keys": reader.keys(), "tokens": reader.hash_tokens(),
            "queue": queue, "links": links, "cache": reader.cache_map()}


def _states(target, impl_name: str, traces, found: list):
    """Each driver after each op of `traces` (the lock step's, in this process; a trace ends
    at its first problem, put in `found`)."""
    impl = target.catalogue.resolve(impl_name)
    for trace in traces(impl):
        lock = target.judge.lockstep(trace, impl.load(), "cpu", **target.judge.options(impl))
        yield lock.impl
        for op in trace.ops:
            _, problems = lock.step(op)
            found += problems
            if problems:
                break
            yield lock.impl


def _read_differs(reader, one_pass=None) -> str | None:
    """The first part the state read answers otherwise than its reader; `one_pass`: a
    replacement for `_each_block` (a mutant), for this read only."""
    if one_pass is not None:
        reader._each_block = one_pass.__get__(reader)
    try:
        whole = reader.pool_state(None, False, False)[2]
    finally:
        reader.__dict__.pop("_each_block", None)
    expected = _separately(reader)
    return next((part for part in expected if whole[part] != expected[part]), None)


def _pool_traces(count: int):
    return lambda impl: [BLOCKPOOL.generator.generate(0, i, [impl]) for i in range(count)]


@pytest.mark.parametrize("target, impl, traces", [
    (BLOCKPOOL, "vllm.blockpool", _pool_traces(6)),
    (KVMANAGER, "vllm.kvmanager", lambda impl: [
        KVMANAGER.alone("corners").generator.generate(0, i) for i in range(3)]),
])
def test_the_one_pass_read_answers_what_each_reader_answers(target, impl, traces):
    states, found = 0, []
    for reader in _states(target, impl, traces, found):
        assert _read_differs(reader) is None, reader
        states += 1
    assert not found and states > 100, (found, states)


def test_a_stale_link_reads_the_same_both_ways():
    from tests.blockpool.test_upstream import doubles

    pool = doubles()["StaleNext"](num_gpu_blocks=6, enable_caching=True, hash_block_size=16)
    reader = driver.PoolReader(pool, 6)
    pool.get_new_blocks(2)
    whole = reader.pool_state(None, False, False)[2]
    assert "keeps its next link" in whole["links"], whole["links"]
    assert _read_differs(reader) is None


def test_a_one_pass_read_that_drops_a_part_is_caught():
    """The mutants: a pass that finds no block holding a link, or that reads every block's
    entry as none."""
    from tests.blockpool.test_upstream import doubles

    real = driver.PoolReader._each_block
    unlinked = lambda self: (*real(self)[:3], [])  # noqa: E731
    unhashed = lambda self: (real(self)[0], [None] * self.size, *real(self)[2:])  # noqa: E731
    pool = doubles()["StaleNext"](num_gpu_blocks=6, enable_caching=True, hash_block_size=16)
    reader = driver.PoolReader(pool, 6)
    pool.get_new_blocks(2)
    assert _read_differs(reader, unlinked) == "links"
    found = []
    assert any(_read_differs(reader, unhashed) == "keys"
               for reader in _states(BLOCKPOOL, "vllm.blockpool", _pool_traces(3), found))


class _Block:
    """A block of a release that keeps no token count (vLLM 0.20: no `block_hash_num_tokens`)."""

    def __init__(self, block_id: int, ref_cnt: int = 0, block_hash=None):
        self.block_id, self.ref_cnt, self.block_hash = block_id, ref_cnt, block_hash
        self.prev_free_block = self.next_free_block = None


def test_a_pool_that_keeps_no_token_count_reads_the_same_both_ways():
    from types import SimpleNamespace

    blocks = [_Block(0), _Block(1, 1, driver.hash_bytes(7) + bytes(4)), _Block(2), _Block(3)]
    head, tail = _Block(-1), _Block(-1)
    chain = [head, blocks[2], blocks[3], tail]
    for before, after in zip(chain, chain[1:]):
        before.next_free_block, after.prev_free_block = after, before
    pool = SimpleNamespace(blocks=blocks, null_block=blocks[0],
                           free_block_queue=SimpleNamespace(fake_free_list_head=head,
                                                            fake_free_list_tail=tail),
                           cached_block_hash_to_block=SimpleNamespace(
                               _cache={blocks[1].block_hash: blocks[1]}),
                           get_num_free_blocks=lambda: 2, get_usage=lambda: 1 / 3)
    reader = driver.PoolReader(pool, 4)
    whole = reader.pool_state(None, False, False)[2]
    assert whole["tokens"] is None and whole["keys"][1] == (7, 0) and whole["queue"] == [2, 3]
    assert _read_differs(reader) is None
