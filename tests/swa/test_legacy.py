"""SGLang's SWA allocator before 0.5.19 (no `free_full`), without a wheel: what the target reads
from a class of that shape (impl/swa/legacy.py), and the calls of its day driven against the
oracle's old contract (oracle/swa/contract.py). `LegacySWA` is kvfuzz's own allocator with
0.5.17's calls (a finish is one `free` of the whole row; `free_swa` releases at once, in a free
group too) and 0.5.20's fix of F; each mutant below is one way an old release got it wrong, and
is caught. The same run on a release: tests/swa/test_legacy_release.py (slow)."""

from __future__ import annotations

import re
from dataclasses import replace

import torch

from kvfuzz.fuzz.swa.target import SWA
from kvfuzz.impl.swa.legacy import contract_names
from kvfuzz.impl.swa.swa_allocator import SWAAllocator
from kvfuzz.oracle.swa.contract import ROW_FREE, SWA_AT_ONCE
from kvfuzz.strategies.swa.profile import LACKING, NO_SEGMENT
from kvfuzz.strategies.swa.scheduler_ops import Misuse
from kvfuzz.strategies.swa.trace import (Admit, Evict, Extend, ExtendTail, Finish, GroupBegin,
                                         GroupEnd, Trace)
from tests.helpers import double

INDICES = range(8)


class LegacySWA(SWAAllocator):
    """0.5.17's API: no free_full, no segment releases, no reclaim calls, no tail allocation."""

    free_full = free_segment = free_swa_segment = free_full_segment = None
    free_segments = free_full_segments = None
    evict_to_free_tokens = reclaim_for_prealloc = alloc_extend_swa_tail = None

    def _peers(self, free_index):
        return self._take_peers(self._whole_pages(free_index) if self.page_size > 1
                                else free_index)

    def free_swa(self, free_index):
        """At once, unmapped slots skipped at every page size (no SWA group of its own)."""
        if free_index.numel():
            peers = self._peers(free_index)
            self.swa_attn_allocator.free(peers[peers > 0])

    def free(self, free_index):
        """Both pools: the SWA peers resolved at the call (0.5.20's fix of F)."""
        if free_index.numel() == 0:
            return
        peers = self._peers(free_index)
        if self.group_open:
            self.swa_free_group.append(peers)
        else:
            self.swa_attn_allocator.free(peers[peers > 0])
        self.full_attn_allocator.free(free_index)


class FreeReadsMappingAtGroupEnd(LegacySWA):
    """F as SGLang up to 0.5.19 shipped it: `free` inside a group is held whole, its SWA peers
    looked up in the mapping only at the group's end."""

    held: list = []

    def free(self, free_index):
        if self.group_open and free_index.numel():
            self.held = [*self.held, free_index.clone()]
            return
        super().free(free_index)

    def free_group_end(self):
        held, self.held = self.held, []
        super().free_group_end()
        if held:
            self.free(torch.cat(held))

    def clear(self):
        self.held = []
        super().clear()


class WindowHeldToGroupEnd(LegacySWA):
    """F's window side as 0.5.18 shipped it: `free_swa` inside a group holds the index to the
    group's end, the mapping kept until then (0.5.17 released at once, 0.5.19 resolves)."""

    windows: list = []

    def free_swa(self, free_index):
        if self.group_open and free_index.numel():
            self.windows = [*self.windows, free_index.clone()]
            return
        super().free_swa(free_index)

    def free_group_end(self):
        windows, self.windows = self.windows, []
        super().free_group_end()
        if windows:
            self.free_swa(torch.cat(windows))

    def clear(self):
        self.windows = []
        super().clear()


class RowFreeReleasesPadding(LegacySWA):
    """At page size 1 the whole row's `free` releases the passed tokens' peer too: slot 0 (what
    today's `free_swa` does with an unmapped slot, where the caller should have used free_full)."""

    def free(self, free_index):
        if self.page_size == 1 and free_index.numel():
            peers = self._peers(free_index)
            self.swa_attn_allocator.free(peers)
            self.full_attn_allocator.free(free_index)
            return
        super().free(free_index)


def declared(name: str):
    """The class as the target reads a release's class (`_declare`), under its test name."""
    impl = double("swa", f"tests.swa.test_legacy:{name}")
    return SWA.catalogue.declare(impl, globals()[name])


def outcomes(impl, indices=INDICES):
    for index in indices:
        trace = SWA.generator.generate(0, index, [impl])
        yield trace, SWA.check(trace, impl)


def test_the_release_calls_are_read_from_the_class():
    class Release18:  # 0.5.18: free_swa deferred in its own group, still no free_full
        def free_swa(self, free_index):
            return self.swa_free_group, self.is_not_in_free_group

    class Release19(Release18):
        def free_full(self, free_index):
            pass

    assert contract_names(LegacySWA) == ("row_free", "swa_at_once")
    assert contract_names(Release18) == ("row_free",)
    assert contract_names(Release19) == ()
    impl = declared("LegacySWA")
    for text in (ROW_FREE, SWA_AT_ONCE, NO_SEGMENT, LACKING["tail"][0], LACKING["reclaim"][0]):
        assert text in impl.preconditions
    trace = SWA.generator.generate(0, 1, [impl])
    assert "no-tail" in trace.origin.generator
    assert not any(isinstance(op, ExtendTail) for op in trace.ops)


def test_an_old_release_shape_agrees_under_its_contract():
    impl = declared("LegacySWA")
    seen = [(trace, outcome) for trace, outcome in outcomes(impl)]
    assert all(outcome.status == "agree" for _, outcome in seen), \
        next(outcome.divergence.headline() for _, outcome in seen if outcome.status != "agree")
    assert any(isinstance(op, Finish) for trace, _ in seen for op in trace.ops)


def test_without_the_old_contract_the_same_class_diverges():
    # what it lacks otherwise still declared: only the calls of its day and their contract gone
    impl = declared("LegacySWA")
    today = replace(impl, preconditions=tuple(text for text in impl.preconditions
                                              if text not in (ROW_FREE, SWA_AT_ONCE)))
    found = [outcome.divergence for _, outcome in outcomes(today, range(6))
             if outcome.status == "diverge"]
    assert found and all(re.search(r"crash at op \d+ of \d+: finish|swa_available_size",
                                   divergence.what) for divergence in found), \
        [divergence.headline() for divergence in found]


def test_each_old_release_fault_is_caught():
    for name, expected in (("FreeReadsMappingAtGroupEnd", r"mapping at op \d+ of \d+: finish"),
                           ("WindowHeldToGroupEnd",
                            r"(mapping|(swa_)?available_size) at op \d+ of \d+: evict"),
                           ("RowFreeReleasesPadding", r"(swa_)?available_size|swa free list")):
        found = next((outcome.divergence for _, outcome in outcomes(declared(name), range(40))
                      if outcome.status == "diverge"), None)
        assert found is not None, f"{name} agreed on 40 traces"
        assert re.match(expected, found.what), found.headline()


def test_a_misuse_through_a_call_the_class_lacks_is_not_made():
    # strict checks: a free_full of mapped slots is the misuse, but the class has no free_full;
    # made anyway, the missing method's TypeError would pass for the expected rejection
    trace = Trace(2, 16, 16, False, (Admit(1), Extend((1,), (5,)), Evict(1, 1),
                                     Misuse("full_while_mapped", 0)), strict=True)
    impl = declared("LegacySWA")
    outcome = SWA.check(trace, impl)
    assert outcome.status == "agree" and outcome.features["free_swa"] == 1
    assert not outcome.features["misuse rejected: full_while_mapped"]
    today = SWA.check(trace, replace(impl, preconditions=tuple(
        text for text in impl.preconditions if text != ROW_FREE)))
    assert today.features["misuse rejected: full_while_mapped"] == 1  # (the accident)


def test_the_history_pass_behind_f_runs_the_same_builds_without_free_groups():
    # `sglang.swa.ungrouped`: F (and C) need a free group; what lies behind them is still seen
    group = LACKING["group"][0]
    impl = declared("FreeReadsMappingAtGroupEnd")
    ungrouped = replace(impl, preconditions=impl.preconditions + (group,))
    assert SWA.catalogue.resolve("sglang.swa.ungrouped").preconditions[-1] == group
    traces = [(trace, outcome) for trace, outcome in outcomes(ungrouped, range(6))]
    assert "no-group" in traces[0][0].origin.generator
    assert not any(isinstance(op, (GroupBegin, GroupEnd)) for trace, _ in traces
                   for op in trace.ops)
    assert all(outcome.status == "agree" for _, outcome in traces)
    padded = declared("RowFreeReleasesPadding")
    padded = replace(padded, preconditions=padded.preconditions + (group,))
    assert any(outcome.status == "diverge" for _, outcome in outcomes(padded, range(40)))
