"""Sync-freedom as a tested property: a lazy flush that moves N pages makes a constant number of
host reads (the hole snapshot), while the commit from before PR 34066 makes one per page."""

import pytest
import torch

from kvfuzz.impl.host_sync import count_host_syncs
from kvfuzz.strategies.compaction.trace import Params
from tests.compaction.sides import factory


def _holes_below_survivors(impl: str, num_holes: int, device: str = "cpu"):
    """`num_holes` interior holes under as many live pages: an urgent flush moves them all."""
    params = Params(total_bytes=8 * (2 * num_holes + 2), epp_up=8, epp_down=8, sink_bytes=8,
                    two_ended=False, move_cap=4096)
    allocator = factory(impl)(params, device)
    vids = allocator.alloc("up", 2 * num_holes)
    allocator.free("up", vids[:num_holes])
    return allocator


def _flush_syncs(impl: str, num_holes: int, device: str = "cpu") -> tuple[int, int]:
    allocator = _holes_below_survivors(impl, num_holes, device)
    with count_host_syncs() as syncs:
        moves = allocator.pools["up"].flush(urgent=True)
    return moves, syncs.total


@pytest.mark.parametrize("num_holes", [4, 64, 512])
def test_a_batched_flush_makes_one_host_read_whatever_it_moves(num_holes):
    assert _flush_syncs("compaction.lazy", num_holes) == (num_holes, 1)


@pytest.mark.parametrize("num_holes", [4, 64, 512])
def test_the_per_page_commit_makes_one_host_read_per_moved_page(num_holes):
    moves, syncs = _flush_syncs("compaction.before", num_holes)
    assert moves == num_holes
    assert syncs == num_holes + 1  # the hole snapshot, then one .item() per moved page


def test_a_blocked_non_urgent_flush_adds_only_the_write_set_read():
    allocator = _holes_below_survivors("compaction.lazy", 64)
    allocator.forward(1, {"up": [10]})  # not the top survivor: nothing blocks
    with count_host_syncs() as syncs:
        moves = allocator.pools["up"].flush(urgent=False)
    assert (moves, syncs.total) == (64, 2), syncs.describe()


@pytest.mark.parametrize("impl", ["compaction.lazy", "compaction.before"])
def test_lazy_free_and_hole_draining_alloc_never_read_the_host(impl):
    allocator = _holes_below_survivors(impl, 16)
    pool = allocator.pools["up"]
    with count_host_syncs() as syncs:
        allocator.free_tensor("up", torch.tensor([20, 21], dtype=torch.int64))
        allocator.alloc_tensor("up", 4)
        pool.drain(urgent=True)
    assert syncs.total == 0, syncs.describe()


class _RejectScalarIndex:
    """The upstream regression proxy: indexing p2v with a Python int is a per-page read."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __getattr__(self, name):
        return getattr(self.tensor, name)

    def __getitem__(self, index):
        if isinstance(index, int):
            raise AssertionError("p2v was read one row at a time")
        return self.tensor[index]

    def __setitem__(self, index, value):
        self.tensor[index] = value


@pytest.mark.parametrize("impl, passes", [("compaction.lazy", True), ("compaction.before", False)])
def test_the_upstream_scalar_index_proxy(impl, passes):
    allocator = _holes_below_survivors(impl, 4)
    pool = allocator.pools["up"]
    pool.p2v = _RejectScalarIndex(pool.p2v)
    if passes:
        assert pool.flush(urgent=True) == 4
    else:
        with pytest.raises(AssertionError, match="one row at a time"):
            pool.flush(urgent=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("impl, expected", [("compaction.lazy", 1), ("compaction.before", 257)])
def test_on_cuda_the_host_read_counts_are_the_same(impl, expected):
    assert _flush_syncs(impl, 256, "cuda") == (256, expected)
