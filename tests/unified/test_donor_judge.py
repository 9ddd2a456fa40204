"""The Mamba profile on the unified memory pool (the Full donor), without SGLang: the oracle's
facts (`oracle/unified/donor.py`) on worked examples, and each check of `donor_state.py` on a
hand-made eviction, correct and broken the way it looks for (a test double only that check
catches)."""

from copy import deepcopy

import pytest

from kvfuzz.fuzz.unified.donor_state import (eviction_problems, full_side_problems,
                                             refusal_problems)
from kvfuzz.fuzz.unified.state import views
from kvfuzz.oracle.unified.donor import overshoot, shared_full_problems, victim_bytes


def test_a_victim_gives_back_its_pages_and_its_state():
    assert victim_bytes(8, True, 4, 128, 304) == 2 * 128 + 304
    assert victim_bytes(4, False, 4, 128, 304) == 128


def test_the_donor_walk_stops_at_the_first_sufficient_victim():
    assert overshoot([400], 200) is None           # one victim: never past
    assert overshoot([100, 150], 200) is None      # the first alone was short
    assert overshoot([250, 300], 200) == 51        # either alone would have done
    assert overshoot([], 200) is None


def test_the_shared_full_side_is_conserved():
    assert shared_full_problems({1, 2}, [3, 4], 2, 2) == []
    assert "1 pages both in the tree and free" in shared_full_problems({1, 2}, [2, 3], 2, 2)[0]
    assert "2 leaked" in shared_full_problems({1}, [], 3, 1)[0]


# Before the eviction: [1 2] (slots 1-2, state 1) with children [1 2 3] (slot 3, state 2) and
# [1 2 4] (slot 4, state 3); a state costs 304 bytes, a token (page size 1) 32, the gap holds 250.
BUFFER = {"gap": 250, "page": 32, "state": 304, "ids": 2, "full_evictable": 4,
          "nodes": [[None, [1, 2], [1, 2], 1], [None, [1, 2, 3], [3], 2],
                    [None, [1, 2, 4], [4], 3]]}


def _after(nodes: list, states: list, evictable: int = 0, mamba_evictable: int = 0) -> tuple:
    snap = {"nodes": [(parent, None, tokens, start, slots, None)
                      for parent, tokens, start, slots in nodes],
            "unlocked": [s for _, _, _, slots in nodes for s in slots], "inner": None,
            "full_evictable": evictable,
            "mamba": {"states": states, "evictable": mamba_evictable}}
    return views(snap, 1), snap


# The LRU leaf [1 2 3] evicted (1 token, its state): 336 bytes >= the 54 missing.
CORRECT = ([(-1, [1, 2], 0, [1, 2]), (0, [1, 2, 4], 2, [4])], [[1], [3]])


def _problems(answer, nodes=CORRECT, inserted=None, buffer=BUFFER):
    found, snap = _after(*nodes, evictable=3, mamba_evictable=2)
    return eviction_problems(found, snap, list(answer[:3]) + [buffer], inserted, 1)


def test_a_correct_donor_eviction_has_no_problem():
    assert _problems([2, 1, 1]) == []
    assert full_side_problems({"free": [5], "full_allocated": 3}, _after(*CORRECT)[0], 1) == []


@pytest.mark.parametrize("answer, nodes, buffer, text", [
    # no state although something was left to evict
    ([None, 1, 1], CORRECT, BUFFER, "no Mamba state after evict_for_alloc"),
    # the donor's tokens left out of the answer
    ([2, 1, 0], CORRECT, BUFFER, "answered 0 tokens and 1 states evicted; 1 tokens"),
    # a state taken from a node that stays, while an id was free and Full could fund it
    ([2, 1, 0], ([(-1, [1, 2], 0, [1, 2]), (0, [1, 2, 3], 2, [3]), (0, [1, 2, 4], 2, [4])],
                 [[1], None, [3]]), BUFFER, "took the state of 1 node(s) that stay"),
    # both leaves evicted where the first was enough
    ([2, 2, 2], ([(-1, [1, 2], 0, [1, 2])], [[1]]), BUFFER, "past the first sufficient victim"),
])
def test_each_donor_check_catches_its_broken_eviction(answer, nodes, buffer, text):
    found = _problems(answer, nodes, buffer=buffer)
    assert found and found[0][0] == "mamba donor" and text in found[0][1], found


def test_a_state_the_insert_puts_back_is_not_the_trees_own():
    # the eviction took [1 2]'s state, the insert of [1 2] put a state there again: the insert
    # answered mamba_exist=False, so the state that left the tree is counted
    stripped = ([(-1, [1, 2], 0, [1, 2]), (0, [1, 2, 3], 2, [3]), (0, [1, 2, 4], 2, [4])],
                [[1], [2], [3]])
    buffer = {**BUFFER, "ids": 0}  # (no id free: the state is the id shortfall's victim)
    assert _problems([2, 1, 0], stripped, ((0, (1, 2)), False), buffer) == []
    said = _problems([2, 1, 0], stripped, ((0, (1, 2)), True), buffer)
    assert said and "0 tokens and 0 states left the tree" in said[0][1]


def test_a_split_above_a_node_keeps_it():
    # an insert of [1] after the eviction splits [1 2]: the lower part keeps slot 2, its state
    nodes = ([(-1, [1], 0, [1]), (0, [1, 2], 1, [2]), (1, [1, 2, 4], 2, [4])],
             [[5], [1], [3]])
    assert _problems([2, 1, 1], nodes) == []
    assert deepcopy(BUFFER) == BUFFER


def test_an_allocation_is_refused_only_with_nothing_evictable_left():
    assert refusal_problems(None, {"full_evictable": 8}) == []
    assert refusal_problems(8, {"full_evictable": 0}) == []
    found = refusal_problems(8, {"full_evictable": 12})
    assert found == [("eviction", "alloc(8) refused after evict_for_alloc, with 12 full tokens "
                                  "still evictable")]
