"""The released SGLang `PureSWARadixCache` (sglang 0.5.23) with its sliding window, on the released
`PureSWATokenToKVPoolAllocator`: seeded `radix-window/1` traces run to their last op and reach
every window event; a trace without the prefill-aware floor is outside the entry's declared
contract, and undeclared, kvfuzz reports what the release then does (a checkpoint caches slots
the window freed: docs/upstream-sglang.md). Skips without SGLang."""

from collections import Counter

import pytest

from kvfuzz.fuzz.engine.target import OUTSIDE_CONTRACT
from kvfuzz.fuzz.radix.target import RADIX
from kvfuzz.fuzz.radix.window import WINDOW_EVENTS
from kvfuzz.impl.radix import RELEASED_PURE_SWA
from kvfuzz.impl.registry import YOURS, Implementation
from kvfuzz.strategies.radix.profile import KEEPS_KEY, NO_RESET_IN_FLIGHT, WINDOW
from kvfuzz.strategies.radix.trace import Admit, Extend, Finish, Trace
from tests.helpers import assert_seeded_traces_agree, divergence, needs_engine, undeclared

pytestmark = needs_engine("sglang")  # slow: it imports SGLang
ENTRY = RADIX.catalogue.resolve("sglang.radix.pure_swa.window")


@pytest.mark.parametrize("shard", range(2))
def test_seeded_window_traces_run_to_their_last_op_on_the_pure_swa_cache(shard):
    assert_seeded_traces_agree("radix", ENTRY, range(shard * 30, (shard + 1) * 30))


def test_seeded_window_traces_reach_every_window_event():
    events = Counter()
    for index in range(12):
        events.update(RADIX.check(RADIX.generator.generate(0, index, [ENTRY]), ENTRY).features)
    missing = set(WINDOW_EVENTS) - set(events)
    assert not missing, sorted(missing)


def __getattr__(name):  # by import path: tests.radix.test_window_upstream:Undeclared
    if name == "Undeclared":
        return undeclared(RELEASED_PURE_SWA)
    raise AttributeError(name)


# Window 1, no floor: the second decode step slides the window over the prompt (nothing of it is
# the tree's), freeing its 3 slots; the finish's checkpoint then inserts the whole row.
FLOORLESS = Trace(1, 16, "lru", False, (
    Admit(1, (1, 2, 3, 4, 5, 6, 7), 3), Extend(1, 3), Extend(1, 1), Extend(1, 1), Finish(1)),
    swa_window=1)


def test_a_window_without_the_floor_is_outside_the_declared_contract():
    assert RADIX.check(FLOORLESS, ENTRY).status == OUTSIDE_CONTRACT
    aware = Trace(**{**FLOORLESS.__dict__, "prefill_aware": True})
    assert RADIX.check(aware, ENTRY).status == "agree"


def test_undeclared_a_checkpoint_caches_the_slots_the_window_freed():
    impl = Implementation("Undeclared", "radix", f"{__name__}:Undeclared", "test double", YOURS,
                          preconditions=(NO_RESET_IN_FLIGHT, KEEPS_KEY, WINDOW))
    found = divergence("radix", FLOORLESS, impl)
    assert found is not None and found.what.startswith("allocator at op 4"), \
        found and found.report()
    assert "3 pages both in the tree and on the free list" in found.report()
