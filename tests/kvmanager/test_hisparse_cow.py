"""HiSparse's host copy-on-write (the "hisparse cow" profile,
`strategies/kvmanager/hisparse_cow.py`; the judge's side: `fuzz/kvmanager/hisparse_cow.py`):
HiSparse's four groups beside a Mamba "align" group hashed below the block, where a hit may end
inside a source block. The codec takes the layout and refuses its near misses in one line; the
judge's exact host count holds a reference more on each end of a copy in flight, the Mamba table
keeps only the states read and written, and an admission counts the Mamba group and each copy of a
hit inside a block (no vLLM); the released class makes host copies and runs index 0 clean (its first
100 run clean in `test_every_profile.py`), and a mutant whose copy's source is released when the
copy is handed out, not once it ran, doubles that never hand the copies out or never release them,
mutants whose hit is shorter than the pools hold and one whose Mamba count leaves out the copy are
caught; on the consumers that fill their private page (`hisparse_cow.FILLED`, not a profile) the
released class publishes that page before any write-back of it ("published early", 9 ops), pinned as
found on vLLM 0.33.0. Skips without vLLM but the codec's and the judge's own tests."""

import dataclasses
import functools
import re
from collections import Counter
from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.kvmanager.hisparse_admission import Admissions, partial_and_mamba
from kvfuzz.fuzz.kvmanager.hisparse_cow import MAMBA, HostCopy, HostCopies
from kvfuzz.fuzz.kvmanager.hisparse_lag import LaggedReports
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec, hisparse_cow
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import divergence, needs_engine

MUTANT = "kvfuzz.impl.kvmanager.upstream_mutants:hisparse_cow_source_not_held"
CLEAN = 0  # index 0 of seed 0 makes host copies and runs clean on vLLM 0.33.0
# the Mamba group's copy of a hit's state left out of its admission's count: index 90 of seed 0
# admits a request a block short (the release refuses it there, and agrees to the last op; 67
# until the profile drew speculative blocks, which that index now has)
COUNT_MUTANT = "kvfuzz.impl.kvmanager.upstream_mutants:mamba_partial_copy_capped"
COUNTED = 90


def test_a_cow_trace_keeps_its_layout_through_the_codec():
    trace = hisparse_cow.GENERATOR.generate(0, 0)
    assert trace.hisparse and trace.mamba_mode == "align"
    assert 0 < trace.hash_block_size < trace.block_size
    assert codec.from_json(to_json(trace)) == trace


@pytest.mark.parametrize("setting", [{"hash_block_size": 0}, {"mamba_mode": ""}])
def test_hisparse_beside_mamba_needs_align_and_a_hash_block_below_the_block(setting):
    # (the Mamba group's checkpoint and speculative blocks: `test_hisparse_cow_mamba.py`)
    trace = dataclasses.replace(hisparse_cow.GENERATOR.generate(0, 0), mamba_checkpoint=0,
                                mamba_speculative=0)
    data = to_json(trace) | setting
    if setting == {"mamba_mode": ""}:  # (a hash block with HiSparse's groups alone)
        match = "field .hisparse.: expected 0 with hash_block_size"
    else:
        match = "field .hisparse.: expected"
    with pytest.raises(FormatError, match=match):
        codec.from_json(data)


class _Judge(HostCopies, LaggedReports):
    """The host count's parts alone: no transfer in flight, no finished request held."""

    def __init__(self, copies):
        self.cow, self.in_flight, self.detached = True, [], {}
        self.host_copies = copies


def test_a_copy_in_flight_holds_a_reference_more_on_each_end():
    judge = _Judge({5: HostCopy(rid=1, source=3, release_at=4, late=False)})
    held = [0, 1, 1, 1, 0, 1, 0]  # the live source tables' holds (block 5: the new table's)
    least, most = judge.expected_refs(held)
    assert least == most == [0, 1, 1, 2, 0, 2, 0]
    assert judge.host_count_problems(held, least) == []
    # the source's reference dropped before the copy ran: caught, named
    dropped = list(least)
    dropped[3] -= 1
    (label, text), = judge.host_count_problems(held, dropped)
    assert label == "host pool" and "block 3 has 1, expected 2" in text
    # released: the tables' holds again
    judge.host_copies = {}
    assert judge.host_count_problems(held, held) == []


class _Tables(HostCopies):
    """The Mamba group's table check alone, over blocks of 4 tokens."""

    def __init__(self):
        self.start_cow()
        self.trace = SimpleNamespace(block_size=4, mamba_speculative=0)


def test_the_mamba_table_keeps_the_state_read_and_the_state_written_only():
    judge = _Tables()
    judge.mamba_stepped(1, 6)  # a step from 6 computed tokens to 13: read block 1, wrote 3
    tables = [[]] * MAMBA + [[0, 7, 0, 9]]
    assert judge.mamba_table_problems(1, tables, 13) == []
    (label, text), = judge.mamba_table_problems(1, [[]] * MAMBA + [[5, 7, 0, 9]], 13)
    assert label == "mamba states" and "positions [0]" in text  # a state moved past, kept
    (label, text), = judge.mamba_table_problems(1, [[]] * MAMBA + [[0, 7, 0, 0]], 13)
    assert "null block" in text  # the state written missing


def test_an_admission_counts_the_mamba_group_and_each_copy_of_a_hit_inside_a_block():
    ref = [0, 0, 1, 0]  # block 1 free (evictable), block 2 held
    # a hit of 6 tokens in blocks of 4 ends inside block 1: one private block more in the
    # source group and in the indexer; the Mamba group its new state (cdiv(9, 4) - 2 = 1, one
    # more for the copy, capped at 2) and the hit's state, free, adopted off the queue
    assert partial_and_mamba(9, 4, 6, [0, 1], ref) == (1, 3)
    assert partial_and_mamba(9, 4, 6, [0, 2], ref) == (1, 2)  # the hit's state held
    # a hit on a block boundary: no copy; the new state only, past the hit's blocks
    assert partial_and_mamba(9, 4, 8, [0, 2], ref) == (0, 1)
    assert partial_and_mamba(8, 4, 4, [2], ref) == (0, 1)
    assert partial_and_mamba(7, 4, 6, [0, 2], ref) == (1, 1)  # within the hit's block: the copy


class _Refusals(Admissions):
    """The refusal check alone beside a Mamba group, blocks of 4, 2 hot blocks."""

    def __init__(self, device_free: int, host_free: int):
        self.cow, self.device_free, self.host_free = True, device_free, host_free
        self.trace = SimpleNamespace(block_size=4, full_sequence_must_fit=False, watermark=0.0,
                                     blocks=64, mamba_checkpoint=0, mamba_speculative=0,
                                     lookahead=0, max_model_len=1024)
        self.counted = []

    def count(self, event):
        self.counted.append(event)


def test_a_refusal_is_judged_only_with_room_for_the_mamba_step_and_the_copies_too():
    request = SimpleNamespace(tokens=list(range(9)), computed=0)
    # an admission of 3 tokens after a hit of 6: 9 slots, 3 blocks; the most it may need on
    # the device 2 * 3 + 2 hot + 1 copy + 3 for the Mamba step = 12, on the host 3 + 1 = 4
    (label, text), = _Refusals(12, 4)._refusal_problems(1, request, 3, 6, False)
    assert label == "refusal" and "needs at most 12" in text and "at most 4)" in text
    assert _Refusals(11, 4)._refusal_problems(1, request, 3, 6, False) == []  # the Mamba step
    assert _Refusals(12, 3)._refusal_problems(1, request, 3, 6, False) == []  # the host copy


def test_the_profile_reaches_its_copies_in_its_traces():
    """Each trace's families share a prompt up to a hash boundary inside a block, and every
    consumer stops short of the block's end (the filled stream's go on)."""
    traces = [hisparse_cow.GENERATOR.generate(0, i) for i in range(20)]
    kinds = Counter(type(op).__name__ for trace in traces for op in trace.ops)
    assert kinds["Arrive"] > 100 and kinds["Finish"] and kinds["Preempt"] and kinds["Evict"]
    assert any(trace.hisparse_lag for trace in traces)
    assert any(not trace.hisparse_lag for trace in traces)
    filled = hisparse_cow.FILLED.generate(0, 0)
    assert codec.from_json(to_json(filled)) == filled and filled.note.endswith("pages filled")


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, each breaking one side of the copy (built on first
    use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")
    coordinator_of = load_attribute("vllm.v1.hisparse.coordinator:get_hisparse_coordinator")

    class CopiesNeverTaken(KVCacheManager):  # the copies stay pending, never handed out
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.coordinator.single_type_managers[0].take_host_cow_copies = lambda: []

    class CopiesNeverReleased(KVCacheManager):  # the worker's report of them ignored
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            coordinator_of(self).release_completed_host_copies = lambda ids: None

    return {cls.__name__: cls for cls in (CopiesNeverTaken, CopiesNeverReleased)}


def __getattr__(name: str):
    if name in ("CopiesNeverTaken", "CopiesNeverReleased"):
        return doubles()[name]
    raise AttributeError(name)


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken, label", [("CopiesNeverTaken", "host copy"),
                                           ("CopiesNeverReleased", "host pool")])
def test_each_copy_check_catches_a_broken_manager(broken, label):
    found = divergence("kvmanager", hisparse_cow.GENERATOR.generate(0, CLEAN),
                       f"{__name__}:{broken}")
    assert found is not None and found.what.startswith(label), found and found.report()


@_ENGINE[0]
@_ENGINE[1]
def test_the_release_makes_host_copies_and_runs_a_copying_trace_clean():
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    outcome = KVMANAGER.check(hisparse_cow.GENERATOR.generate(0, CLEAN),
                              KVMANAGER.catalogue.resolve("vllm.kvmanager"))
    assert outcome.status == "agree", outcome.divergence and outcome.divergence.report()
    assert outcome.features["host copy made (a partial local hit)"]


@_ENGINE[0]
@_ENGINE[1]
def test_a_copys_source_released_before_it_ran_is_caught():
    found = divergence("kvmanager", hisparse_cow.GENERATOR.generate(0, CLEAN), MUTANT)
    assert found is not None and found.what.startswith("host pool"), found
    has, expected = map(int, re.search(r"block \d+ has (\d+), expected (\d+)",
                                       found.lines[-1][1]).groups())
    assert expected == has + 1, found.report()  # the copy's reference, dropped early


# The released class publishes a partial local hit's private page under the request's hash at
# its admission, with no write-back of the page done or planned (the coordinator counts
# cdiv(hit, b) pages ready, `commit_computed_blocks`): shrunk from index 0 of the stream that
# became `FILLED` (2026-12-06)
FOUND = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 13, "block_size": 2, "window": 0,
         "max_model_len": 1024, "full_sequence_must_fit": True, "watermark": 0.1,
         "hash_block_size": 1, "mamba_mode": "align", "hisparse": 10,
         "hisparse_lag": [1, 1, 1595327542],
         "ops": [{"op": "arrive", "rid": 4, "tokens": [2000, 2001, 2002, 2003]},
                 {"op": "schedule", "rid": 4, "chunk": 3},
                 {"op": "schedule", "rid": 4, "chunk": 1},
                 {"op": "decode", "rid": 4, "token": 2500},
                 {"op": "decode", "rid": 4, "token": 2503},
                 {"op": "decode", "rid": 4, "token": 2504},
                 {"op": "finish", "rid": 4},
                 {"op": "arrive", "rid": 5, "tokens": [2000, 2001, 2002, 2700]},
                 {"op": "schedule", "rid": 5, "chunk": 5}]}


@_ENGINE[0]
@_ENGINE[1]
def test_the_release_publishes_a_partial_hits_page_before_its_write_back():
    found = divergence("kvmanager", codec.from_json(FOUND), "vllm.kvmanager")
    assert found is not None and found.step == 8, found
    assert found.what.startswith("published early"), found.report()


@_ENGINE[0]
@_ENGINE[1]
def test_an_admission_counting_no_copy_of_the_mamba_hit_state_is_caught():
    """Only the exact admission count beside a Mamba group catches it (the "mamba align"
    profile's first 200 do not; before the count, neither did this profile's)."""
    trace = hisparse_cow.GENERATOR.generate(0, COUNTED)
    found = divergence("kvmanager", trace, COUNT_MUTANT)
    assert found is not None and found.what.startswith("None vs success"), found
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("name", ["mamba_align_hit_short", "mamba_align_partial_hit_ignored"])
def test_a_hit_shorter_than_the_pools_hold_is_caught(name):
    """The hit's exact length over the host and device pools' entries: a lookup capped a hash
    block short, and a Mamba lookup ignoring its partial entries, each caught at index 0 (the
    release clean there: `test_the_release_makes_host_copies_and_runs_a_copying_trace_clean`);
    without the length check this profile's first 50 agree on both."""
    found = divergence("kvmanager", hisparse_cow.GENERATOR.generate(0, CLEAN),
                       f"mutant.vllm.kvmanager.{name}")
    assert found is not None and found.what.startswith("prefix hit"), found
    assert "expected" in found.lines[-1][1] and "the source group's host entries cover" in \
        found.lines[-1][1], found.report()
