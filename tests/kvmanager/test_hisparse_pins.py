"""HiSparse's device pool judged exactly (`fuzz/kvmanager/hisparse_pins.py`): each device block's
reference count is the live indexer and hot tables that hold it, the resident pages still pinned
and the write-backs in flight; and a host hit adopts the GPU copies recorded for its pages
(`fuzz/kvmanager/hisparse_copies.py`). Doubles of the released coordinator break one rule each,
and the check named is caught at the index of the stream pinned here (the indices before agree
with the release): the resident pins never released when a write-back completes (`kvfuzz
mutate`'s line 793 of `vllm/v1/hisparse/coordinator.py` removed, a survivor until 2026-12-05),
a page written back never unpinned (line 813 removed, the same), the table's last pages unpinned
too (`ACTIVE_TAIL_PAGES` taken as 0: a page a step in flight writes could be handed out under
it), all "device pool" on the "hisparse lag" stream; and an import's restored page leaving no
GPU copy (line 815's effect, a survivor), "adoption" on the "hisparse import" stream. The
release runs the three HiSparse profiles clean (`test_every_profile.py`). Skips without vLLM."""

import functools

import pytest

from kvfuzz.strategies.kvmanager import hisparse_import, hisparse_lag
from tests.helpers import divergence, needs_engine
from tests.kvmanager.hisparse_doubles import broken_manager


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class whose HiSparse coordinator (built in the constructor and
    memoised on the managers) breaks one rule of the device pins. Built on first use."""
    Broken = broken_manager()  # (its coordinator handed to each double's `break_`)

    class PinsNeverReleased(Broken):  # line 793: a completed write-back keeps its GPU pins
        @staticmethod
        def break_(coordinator):
            apply, pool = coordinator._apply_enqueued_spills, coordinator.gpu_pool

            def keeping():
                pool.free_blocks = lambda blocks: None
                try:
                    apply()
                finally:
                    del pool.free_blocks  # the pool's own method again
            coordinator._apply_enqueued_spills = keeping

    class CleanPagesStayPinned(Broken):  # line 813: a page written back never unpinned
        @staticmethod
        def break_(coordinator):
            coordinator._page_became_clean = lambda request_id, state, page: None

    class TailUnpinned(Broken):  # the last ACTIVE_TAIL_PAGES pages unpinned like the rest
        @staticmethod
        def break_(coordinator):
            def resident(request_id, page):
                blocks = [manager.get_resident_page(request_id, page)
                          for manager in coordinator.resident_managers]
                return None if None in blocks else blocks
            coordinator._resident_page_blocks = resident

    class RestoreLeavesNoCopy(Broken):  # line 815's effect: a restored page not recorded
        @staticmethod
        def break_(coordinator):
            complete = coordinator._complete_host_writes

            def forgetting():
                restores = [p for p in coordinator.pending_spills.values() if p.restore]
                complete()
                for pending in restores:  # those just completed: their copy dropped again
                    key = pending.host_block.block_hash
                    if pending.transfer_id not in coordinator.pending_spills and \
                            key is not None and \
                            coordinator.copies.get(key) == pending.resident_blocks:
                        coordinator._drop_copy(key)
            coordinator._complete_host_writes = forgetting

    return {cls.__name__: cls for cls in (PinsNeverReleased, CleanPagesStayPinned,
                                          TailUnpinned, RestoreLeavesNoCopy)}


NAMES = ("PinsNeverReleased", "CleanPagesStayPinned", "TailUnpinned", "RestoreLeavesNoCopy")


def __getattr__(name):  # a double by import path: tests.kvmanager.test_hisparse_pins:...
    if name in NAMES:
        return doubles()[name]
    raise AttributeError(name)


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)

LAG, IMPORT = hisparse_lag.GENERATOR, hisparse_import.GENERATOR
# (double, its stream (seed 0) and first index there that kills it, the check, words of the
# message: a pin kept where none should be left, one dropped from a tail page, a copy missing)
KILLS = [("PinsNeverReleased", LAG, 0, "device pool",
          "has 1, expected 0 (0 tables, 0 resident pins, 0 in flight)"),
         ("CleanPagesStayPinned", LAG, 1, "device pool",
          "has 1, expected 0 (0 tables, 0 resident pins"),
         ("TailUnpinned", LAG, 0, "device pool", "has 0, expected 1 (0 tables, 1 resident pins"),
         ("RestoreLeavesNoCopy", IMPORT, 8, "adoption", "the GPU copies recorded for its hash")]


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken, stream, index, label, words", KILLS, ids=[k[0] for k in KILLS])
def test_a_broken_pin_or_copy_is_caught_at_its_index(broken, stream, index, label, words):
    broken = f"{__name__}:{broken}"
    assert all(divergence("kvmanager", stream.generate(0, i), broken) is None
               for i in range(index))
    found = divergence("kvmanager", stream.generate(0, index), broken)
    assert found is not None and found.what.startswith(label), found and found.report()
    assert words in found.report(), found.report()
