"""A hypothesis state machine over request lifecycles: admit (with shared prefixes), chunked
extend, batches filled to the brim, decode, finish and truncate by every free call, free groups,
whole-page alloc and clear; oracle and `PagedAllocator` in lock step. A failure prints the trace as
JSON: save it under corpus/ and replay it with `kvfuzz replay`."""

import hypothesis.strategies as st
from hypothesis import settings, target
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvfuzz.fuzz.allocator.lockstep import AllocatorLockstep
from kvfuzz.fuzz.allocator.target import ALLOCATOR
from kvfuzz.oracle.allocator.invariants import state_violations
from kvfuzz.strategies.allocator.trace import (FREE_HOWS, Admit, AllocPages, Clear, Decode, Extend,
                                               Finish, GroupBegin, GroupEnd, Trace, Truncate)
from tests.helpers import dumps
from tests.helpers import assert_machine_catches

hows = st.sampled_from(FREE_HOWS)


@settings(max_examples=30, stateful_step_count=60, deadline=None)
class AllocatorMachine(RuleBasedStateMachine):
    impl_name = "allocator.torch"

    @initialize(page_size=st.sampled_from([1, 2, 4, 8]), pages=st.integers(2, 24),
                need_sort=st.booleans())
    def setup(self, page_size, pages, need_sort):
        self.trace = Trace(page_size, pages * page_size, need_sort, ())
        impl = ALLOCATOR.catalogue.resolve(self.impl_name)
        self.lock = AllocatorLockstep(self.trace, impl.load())
        self.ops, self.next_rid, self.fullest = [], 0, 0.0

    def _step(self, op) -> None:
        self.ops.append(op)
        _, problems = self.lock.step(op)
        if problems:
            trace = Trace(self.trace.page_size, self.trace.size, self.trace.need_sort,
                          tuple(self.ops))
            found = ALLOCATOR.check(trace, ALLOCATOR.catalogue.resolve(self.impl_name)).divergence
            report = found.report() if found else f"(not reproduced by a replay) {problems}"
            raise AssertionError(f"{report}\ntrace JSON:\n{dumps(trace)}")
        model = self.lock.model
        taken = 1 - (len(model.free) + len(model.staged)) / model.num_pages
        self.fullest = max(self.fullest, taken)

    def _live(self, index: int):
        live = sorted(self.lock.sched.rows)
        return live[index % len(live)]

    def _rid(self) -> int:
        self.next_rid += 1
        return self.next_rid

    def has_live(self):
        return bool(getattr(self, "lock", None) and self.lock.sched.rows)

    def teardown(self):
        if hasattr(self, "fullest"):  # steer toward full pools, where allocator bugs live
            target(self.fullest, label="peak pool occupancy")

    @rule(share=st.integers(0, 99), pages=st.integers(0, 3), prompt=st.integers(0, 40))
    def admit(self, share, pages, prompt):
        rid = self._rid()
        donor = self._live(share) if self.has_live() and pages else None
        self._step(Admit(rid, donor, pages if donor is not None else 0))
        self._step(Extend((rid,), (prompt,)))

    @precondition(has_live)
    @rule(picks=st.lists(st.integers(0, 99), min_size=1, max_size=4),
          lens=st.lists(st.integers(0, 20), min_size=4, max_size=4), exact=st.booleans())
    def extend(self, picks, lens, exact):
        rids = tuple(dict.fromkeys(self._live(i) for i in picks))
        self._step(Extend(rids, tuple(lens[:len(rids)]), exact=exact))

    @precondition(has_live)
    @rule(pick=st.integers(0, 99), fill=st.sampled_from([-1, 0, 1]), trim=st.integers(0, 7))
    def extend_to_the_brim(self, pick, fill, trim):
        self._step(Extend((self._live(pick),), (0,), fill=fill, trim=trim))

    @precondition(has_live)
    @rule(steps=st.integers(1, 12))
    def decode(self, steps):
        for _ in range(steps):
            self._step(Decode())

    @precondition(has_live)
    @rule(pick=st.integers(0, 99), how=hows)
    def finish(self, pick, how):
        self._step(Finish(self._live(pick), how))

    @precondition(has_live)
    @rule(pick=st.integers(0, 99), keep=st.integers(0, 40), how=hows)
    def truncate(self, pick, keep, how):
        self._step(Truncate(self._live(pick), keep, how))

    @rule()
    def group_begin(self):
        self._step(GroupBegin())

    @rule()
    def group_end(self):
        self._step(GroupEnd())

    @rule(pages=st.integers(-1, 4), relative=st.booleans())
    def alloc(self, pages, relative):
        self._step(AllocPages(self._rid(), pages if relative else max(0, pages), relative))

    @rule()
    def clear(self):
        self._step(Clear())

    @invariant()
    def oracle_state_is_a_partition_of_the_pool(self):
        if hasattr(self, "lock"):
            model = self.lock.model
            assert state_violations(model.num_pages, model.free, model.staged,
                                    model.pending_pages(), self.lock.sched.holders) == []


TestAllocatorMachine = AllocatorMachine.TestCase


def test_state_machine_catches_free_without_dedup():
    assert_machine_catches(AllocatorMachine, "mutant.allocator.free_no_dedup",
                           "pages twice on the (free list|staged)", steps=40)
