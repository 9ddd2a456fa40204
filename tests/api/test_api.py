"""kvfuzz as a library: diff, replay, check and assert_agrees with implementations given as
names, import paths or the objects themselves, and the public Hypothesis strategies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

import kvfuzz
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.allocator.paged_allocator import PagedAllocator
from kvfuzz.impl.paged.vectorized import alloc_extend
from tests.conftest import CORPUS


def off_by_one(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device):
    alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_indices, page_size, device)
    if out_indices.shape[0] > 1:
        out_indices[-1] += 1


def test_diff_takes_the_function_itself(tmp_path):
    result = kvfuzz.diff("extend", alloc_extend, cases=200, corpus=tmp_path)
    assert result.status == 0 and not result.divergences
    (tally,) = result.tallies.values()
    assert tally.cases == 200 and tally.agree + tally.outside == 200
    assert list(tmp_path.iterdir()) == []


def test_a_broken_function_gives_a_shrunk_saved_report(tmp_path):
    result = kvfuzz.diff("extend", [off_by_one, "torch.vectorized"], cases=200, corpus=tmp_path)
    assert result.status == 1
    (found,) = result.divergences
    assert found.impl.endswith(":off_by_one") and found.input.note.startswith("shrunk from")
    assert found.saved_path == str(tmp_path / found.file_name())
    assert "wrong slot" in found.report() and "replay    kvfuzz replay" in found.report()


def test_assert_agrees_fails_with_the_report():
    kvfuzz.assert_agrees("allocator", PagedAllocator, cases=5)
    with pytest.raises(AssertionError, match="DIVERGENCE  extend  implementation"):
        kvfuzz.assert_agrees("extend", off_by_one, cases=200)


def test_replay_applies_each_implementation_to_its_own_target():
    result = kvfuzz.replay(CORPUS, [off_by_one, "allocator.torch"])
    targets = {TARGETS[path.name.split("-")[0]].name for path, _, _ in result.outcomes}
    assert targets == {"extend", "allocator"}  # no decode or compaction implementation given
    assert not result.ok and "off_by_one" in result.report()


def test_an_object_of_the_wrong_shape_is_refused_in_one_line():
    with pytest.raises(ValueError, match="is a class"):
        kvfuzz.implementation("extend", PagedAllocator)
    with pytest.raises(ValueError, match="unknown target"):
        kvfuzz.diff("nosuch", alloc_extend)


@pytest.mark.parametrize("strategy, target", [
    (kvfuzz.extend_cases, "extend"), (kvfuzz.decode_cases, "decode"),
    (kvfuzz.allocator_traces, "allocator"), (kvfuzz.compaction_traces, "compaction")])
def test_public_strategies_feed_single_checks(strategy, target):
    impl = TARGETS[target].catalogue.defaults()[0]

    @settings(max_examples=15, deadline=None, database=None)
    @given(strategy())
    def agrees(item):
        kvfuzz.assert_agrees(target, impl, item)

    agrees()


def test_a_property_over_a_public_strategy_catches_a_bug():
    @settings(max_examples=100, deadline=None, database=None)
    @given(kvfuzz.extend_cases())
    def agrees(case):
        kvfuzz.assert_agrees("extend", off_by_one, case)

    with pytest.raises(kvfuzz.Mismatch, match="off_by_one"):
        agrees()
