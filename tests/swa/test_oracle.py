"""The SWA oracle on worked examples (upstream SWATokenToKVPoolAllocator's source is the contract):
both pools or neither, the mapping following every allocation and release, whole-page SWA
releases, free groups; its invariants on broken states; and the trace format: version-stable
JSON, one-line errors, a pinned generator, and the declared precondition."""

import re

import pytest

from kvfuzz.impl.swa import UPSTREAM_DECLARES
from kvfuzz.oracle.swa.invariants import mapping_violations
from kvfuzz.oracle.swa.model import Rejected, SWAModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.swa.codec import from_json
from tests.helpers import loads
from kvfuzz.strategies.swa.generator import generate, generator_for
from kvfuzz.strategies.swa.profile import CHECKED_DECODE, broken
from kvfuzz.strategies.swa.trace import FORMAT, Admit, Decode, Extend, Trace
from tests.helpers import dumps


def test_page_size_1_allocates_in_both_pools_or_neither_and_maps_each_token():
    model = SWAModel(6, 3, 1, need_sort=False)
    assert model.alloc(2) == [1, 2] and model.mapping == {1: 1, 2: 2}
    assert model.alloc(2) is None  # the SWA pool has 1 slot left: nothing changes
    assert model.full.free == [3, 4, 5, 6] and model.swa.free == [3]
    model.free_swa([1])  # the window passed token 1: its SWA slot goes back, the full one stays
    assert model.swa.free == [3, 1] and model.mapping == {2: 2}
    model.free_full([1])
    model.free([2])
    assert model.full.free == [3, 4, 5, 6, 1, 2] and model.swa.free == [3, 1, 2]
    assert model.mapping == {} and model.available_size() == 3


def test_paged_extend_continues_the_swa_peer_of_last_loc_and_needs_both_pools():
    model = SWAModel(16, 8, 4, need_sort=False)  # full pages 1..4, SWA pages 1..2
    assert model.alloc_extend([0], [6], [-1]) == [4, 5, 6, 7, 8, 9]
    assert model.swa.free == [] and model.full.free == [3, 4]
    assert model.alloc_decode([7], [9]) == [10] and model.mapping[10] == 10
    assert model.alloc_extend([7], [9], [10]) is None  # a new page: the SWA pool has none
    assert model.full.free == [3, 4]
    model.free_swa_segment([4, 5, 6, 7], 0)  # the window passed the first page
    assert model.swa.free == [1] and sorted(model.mapping) == [8, 9, 10]
    assert model.alloc_extend([7], [9], [10]) == [11, 12]
    assert model.mapping[11] == 11 and model.mapping[12] == 4  # SWA page 1, same offset


def test_paged_free_swa_releases_whole_pages_and_skips_unmapped_slots():
    model = SWAModel(16, 16, 4, need_sort=False)
    model.alloc_extend([0], [6], [-1])  # slots 4..9: pages 1 and 2 of both pools
    model.free_swa([9])  # slot 9 touches page 2: every slot of it unmapped, SWA page 2 freed
    assert sorted(model.mapping) == [4, 5, 6, 7] and model.swa.free == [2, 3, 4]


def test_a_free_group_unmaps_at_once_and_releases_at_the_end_and_cannot_nest():
    model = SWAModel(6, 6, 1, need_sort=False)
    model.alloc(3)
    model.group_begin()
    model.free([1, 2])
    assert model.mapping == {3: 3} and model.available_size() == 3  # released only at the end
    with pytest.raises(Rejected):
        model.group_begin()
    assert model.group_open and model.swa_page_ids_group == [1, 2]
    model.group_end()
    assert model.swa.free == [4, 5, 6, 1, 2] and model.full.free == [4, 5, 6, 1, 2]
    model.group_end()  # a stray end does nothing
    assert model.available_size() == 5


def test_a_decode_one_pool_cannot_serve_changes_nothing():
    model = SWAModel(8, 4, 4, need_sort=False)  # 2 full pages, 1 SWA page
    model.alloc_extend([0], [4], [-1])
    assert not model.would_decode([5]) and model.alloc_decode([5], [7]) is None
    assert model.full.free == [2] and model.swa.free == []


def test_mapping_invariants_name_what_is_wrong():
    rows, evicted = {1: [4, 5, 6]}, {1: 1}
    assert mapping_violations({5: 5, 6: 6}, rows, evicted, 4) == []
    problems = " | ".join(mapping_violations({4: 4, 6: 7, 9: 5}, rows, evicted, 4))
    assert "tokens inside their window have no SWA slot, e.g. r1 position 1 (full slot 5)" \
        in problems
    assert "full slot 4 -> SWA slot 4" in problems  # evicted, still mapped
    assert "another in-page offset, e.g. 6 -> 7" in problems


def test_the_format_round_trips_and_pins_its_fields():
    trace = generate(0, 3)
    text = dumps(trace)
    assert loads(text) == trace and f'"format": "{FORMAT}"' in text
    # The id is the content's: a different decode mode is another trace, provenance is not.
    ops = (Admit(1), Extend((1,), (3,)), Decode())
    unchecked = Trace(2, 8, 8, False, ops[:2] + (Decode((), checked=False),))
    assert loads(dumps(unchecked)) == unchecked
    assert Trace(2, 8, 8, False, ops).trace_id() != unchecked.trace_id()
    assert Trace(2, 8, 8, False, ops, note="x").trace_id() == Trace(2, 8, 8, False, ops).trace_id()


@pytest.mark.parametrize("change, field", [
    ({"size_swa": 1, "page_size": 2}, "size_swa"),
    ({"ops": [{"op": "extend", "rids": [1], "lens": []}]}, "ops[0].lens"),
    ({"ops": [{"op": "extend", "rids": [1], "lens": [0]}]}, "ops[0].lens[0]"),
    ({"ops": [{"op": "evict", "rid": 1}]}, "ops[0].keep"),
    ({"ops": [{"op": "finish", "rid": 1, "how": "all"}]}, "ops[0].how"),
    ({"ops": [{"op": "decode", "checked": "yes"}]}, "ops[0].checked"),
    ({"need_sort": None}, "need_sort"),
])
def test_bad_fields_are_one_line_errors_naming_the_field(change, field):
    data = {"format": FORMAT, "page_size": 1, "size": 8, "size_swa": 8, "need_sort": False,
            "ops": []}
    with pytest.raises(FormatError, match=rf"^t\.json: field '{re.escape(field)}'"):
        from_json({**data, **change}, "t.json")


def test_the_generator_is_pinned_and_the_checked_stream_has_no_unchecked_decode():
    # A change to what the generator makes must bump its version ("swa/3"): these pin it.
    assert (generate(0, 0).trace_id(), generate(7, 3).trace_id()) == \
        ("e18f06e4ea50030f", "1bc61266addbd610")
    checked = generator_for(True)
    assert checked.name == "swa/3[checked decode]"
    traces = [checked.generate(0, i) for i in range(30)]
    assert all(not broken(t, UPSTREAM_DECLARES) for t in traces)
    unchecked = [generate(0, i) for i in range(30)]
    assert any(broken(t, UPSTREAM_DECLARES) == [CHECKED_DECODE] for t in unchecked)
