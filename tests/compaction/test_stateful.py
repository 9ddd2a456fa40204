"""A hypothesis state machine: random interleavings of alloc / free / flush / forward / fire /
drain on both pools, oracle and implementation in lock step. A failure prints the shrunk trace as
JSON: save it under corpus/ and replay it with `kvfuzz replay`."""

import hypothesis.strategies as st
import pytest
from hypothesis import settings, target
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from kvfuzz.fuzz.compaction.lockstep import CompactionLockstep
from kvfuzz.fuzz.compaction.target import COMPACTION
from kvfuzz.strategies.compaction.trace import (WHERE, Alloc, Clear, Drain, Fire, Flush, Forward,
                                                Free, Params, Pick, Trace)
from tests.helpers import dumps
from tests.compaction.sides import factory
from tests.helpers import assert_machine_catches

pools = st.sampled_from(["up", "down"])
picks = st.builds(Pick, st.sampled_from(WHERE), st.integers(1, 4), st.integers(0, 99))


# A quarter of the profile's examples (dev 37, ci 75, nightly 5,000): each is a 50-step run.
@settings(max_examples=max(20, settings.default.max_examples // 4), stateful_step_count=50,
          deadline=None)
class CompactionMachine(RuleBasedStateMachine):
    impl_name = "compaction.lazy"

    @initialize(two_ended=st.booleans(), epps=st.sampled_from([(8, 8), (4, 6), (8, 12)]),
                pages=st.integers(6, 24), move_cap=st.sampled_from([1, 2, 4096]))
    def setup(self, two_ended, epps, pages, move_cap):
        widest = max(epps)
        self.params = Params(total_bytes=widest * pages + 1, epp_up=epps[0], epp_down=epps[1],
                             sink_bytes=widest, two_ended=two_ended, move_cap=move_cap)
        self.ops = []
        self.fullest = 0.0
        self.lock = CompactionLockstep(Trace(self.params, ()), factory(self.impl_name))

    def _pool(self, pool: str) -> str:
        return pool if self.params.two_ended else "up"

    def _step(self, op) -> None:
        self.ops.append(op)
        _, problems = self.lock.step(op)
        if problems:
            trace = Trace(self.params, tuple(self.ops))
            found = COMPACTION.check(trace, COMPACTION.catalogue.resolve(self.impl_name)).divergence
            report = found.report() if found else f"(not reproduced by a replay) {problems}"
            raise AssertionError(f"{report}\ntrace JSON:\n{dumps(trace)}")
        up = self.lock.snaps["up"]
        self.fullest = max(self.fullest, up.live / max(1, len(up.v2p) - 2))

    def teardown(self):
        if hasattr(self, "fullest"):  # steer toward runs that fill the pool (saturation bugs)
            target(self.fullest, label="peak up-pool occupancy")

    @rule(pool=pools, n=st.integers(1, 6))
    def alloc(self, pool, n):
        self._step(Alloc(self._pool(pool), n))

    @rule(pool=pools, extra=st.sampled_from([-2, -1, 0, 1]))
    def alloc_to_the_brim(self, pool, extra):
        self._step(Alloc(self._pool(pool), extra, relative=True))

    @rule(pool=pools, pick=picks)
    def free(self, pool, pick):
        self._step(Free(self._pool(pool), pick))

    @rule(pool=pools, urgent=st.booleans())
    def flush(self, pool, urgent):
        self._step(Flush(self._pool(pool), urgent))

    @rule(pool=pools, urgent=st.booleans())
    def drain(self, pool, urgent):
        self._step(Drain(self._pool(pool), urgent))

    @rule(up=st.none() | picks, down=st.none() | picks)
    def forward(self, up, down):
        self._step(Forward(up, down if self.params.two_ended else None))

    @rule(which=st.sampled_from(["oldest", "newest", "all"]))
    def fire(self, which):
        self._step(Fire(which))

    @rule(pool=st.none() | pools)
    def clear(self, pool):
        self._step(Clear(pool and self._pool(pool)))


class EagerCompactionMachine(CompactionMachine):
    impl_name = "compaction.eager"


TestLazyCompactionMachine = CompactionMachine.TestCase
TestEagerCompactionMachine = pytest.mark.slow(EagerCompactionMachine.TestCase)  # lazy: quick


def test_the_machine_catches_a_mutant():
    assert_machine_catches(CompactionMachine, "mutant.compaction.p2v_not_cleared", "field p2v",
                           steps=30)
