"""The worked examples of the spec (§4, E1-E5), pinned on the oracle and every implementation."""

import pytest

from kvfuzz.fuzz.compaction.sides import stamp
from kvfuzz.strategies.compaction.trace import Params
from tests.compaction.sides import side as make_side

# R = 1, ps = 1, one grow-up pool of 16 pages, identity ids at first.
PARAMS = Params(total_bytes=4 * 17, epp_up=4, epp_down=4, sink_bytes=4, two_ended=False,
                move_cap=4096)
LAZY_SIDES = ["oracle.lazy", "compaction.lazy", "compaction.before"]


def _filled(name: str, n: int):
    side = make_side(name, PARAMS)
    vids = side.alloc("up", n)
    assert vids == list(range(1, n + 1))
    side.write("up", vids, [stamp(vid, 4) for vid in vids])
    return side


def _data_followed(side) -> None:
    live = side.read_live("up")
    assert live == {vid: stamp(vid, 4) for vid in live}


@pytest.mark.parametrize("name", LAZY_SIDES)
def test_e1_urgent_flush_moves_top_survivors_into_deepest_holes(name):
    side = _filled(name, 12)
    side.free("up", [2, 3, 4, 5])
    snap = side.snapshot("up")
    assert (snap.wm, snap.live, snap.holes) == (13, 8, (2, 3, 4, 5))
    assert side.flush("up", urgent=True) == 4
    snap = side.snapshot("up")
    assert (snap.wm, snap.holes, snap.pending) == (9, (), ())
    assert [snap.v2p[vid] for vid in (12, 11, 10, 9)] == [2, 3, 4, 5]
    _data_followed(side)


@pytest.mark.parametrize("urgent, wm, holes", [(True, 4, ()), (False, 5, (4,))])
@pytest.mark.parametrize("name", LAZY_SIDES)
def test_e2_boundary_holes_are_absorbed(name, urgent, wm, holes):
    side = _filled(name, 6)
    side.free("up", [3, 5, 6])
    assert side.flush("up", urgent=urgent) == 1
    snap = side.snapshot("up")
    assert (snap.wm, snap.holes, snap.v2p[4]) == (wm, holes, 3)
    _data_followed(side)


@pytest.mark.parametrize("name", LAZY_SIDES)
def test_e3_the_crossing_check_stops_the_walk(name):
    side = _filled(name, 5)
    side.free("up", [2, 3, 4])
    assert side.flush("up", urgent=True) == 1
    snap = side.snapshot("up")
    assert (snap.wm, snap.v2p[1], snap.v2p[5], snap.live) == (3, 1, 2, 2)


@pytest.mark.parametrize("name", LAZY_SIDES)
def test_e4_a_read_race_files_the_source_as_pending(name):
    side = _filled(name, 6)
    side.free("up", [2])
    side.forward(1, {})
    assert side.flush("up", urgent=False) == 1
    snap = side.snapshot("up")
    assert (snap.pending, snap.holes, snap.wm) == (((1, (6,)),), (), 7)
    assert snap.wm - 1 == snap.live + len(snap.holes) + len(snap.pending_set)
    side.drain("up", urgent=False)
    assert side.snapshot("up").pending == ((1, (6,)),)  # drain releases fired events only
    side.fire(1)
    side.drain("up", urgent=False)
    assert side.snapshot("up").holes == (6,)
    assert side.flush("up", urgent=False) == 0
    assert side.snapshot("up").wm == 6


@pytest.mark.parametrize("name", LAZY_SIDES)
def test_e5_a_write_race_blocks_a_non_urgent_flush(name):
    side = _filled(name, 6)
    side.free("up", [2])
    side.forward(1, {"up": [6]})
    assert side.flush("up", urgent=False) == 0
    assert side.snapshot("up").holes == (2,)
    side.fire(1)
    assert side.flush("up", urgent=False) == 1
    snap = side.snapshot("up")
    assert (snap.pending, snap.holes, snap.v2p[6]) == ((), (6,), 2)


@pytest.mark.parametrize("name", LAZY_SIDES)
def test_a_second_batch_under_the_same_event_accumulates(name):
    side = make_side(name, Params(total_bytes=4 * 17, epp_up=4, epp_down=4, sink_bytes=4,
                              two_ended=False, move_cap=1))
    side.alloc("up", 8)
    side.free("up", [1, 2, 3])
    side.forward(1, {})
    assert [side.flush("up", urgent=False) for _ in range(2)] == [1, 1]
    assert side.snapshot("up").pending == ((1, (7, 8)),)


@pytest.mark.parametrize("name", ["oracle.eager", "compaction.eager"])
def test_eager_free_compacts_at_once(name):
    side = _filled(name, 12)
    side.free("up", [2, 3, 4, 5])
    snap = side.snapshot("up")
    assert (snap.wm, snap.holes, snap.num_moves) == (9, (), 4)
    assert [snap.v2p[vid] for vid in (9, 10, 11, 12)] == [2, 3, 4, 5]
    _data_followed(side)


@pytest.mark.parametrize("name", ["oracle.lazy", "compaction.lazy"])
def test_an_alloc_short_of_room_flushes_the_neighbour(name):
    params = Params(total_bytes=8 * 20, epp_up=8, epp_down=8, sink_bytes=8, two_ended=True)
    side = make_side(name, params)
    up = side.alloc("up", 10)
    side.alloc("down", side.avail("down"))
    side.free("up", up[:5])  # five interior holes the down pool can only reach by a flush
    assert side.avail("down") == 0
    assert side.alloc("down", 5) is not None
    assert side.snapshot("up").holes == ()
