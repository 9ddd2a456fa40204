"""A second connector's imports into HiSparse's host pool (the "hisparse import" profile),
judged by `fuzz/kvmanager/hisparse_import.py` (the released class runs the seeded traces clean:
`test_every_profile.py`): each of its checks catches a broken manager (a catalogue mutant of
the released source, or a test double here) on the profile's first traces. Skips without
vLLM."""

import functools

import pytest

from kvfuzz.strategies.kvmanager import hisparse_import
from tests.helpers import divergence, needs_engine
from tests.kvmanager.hisparse_doubles import broken_manager


def _source(manager):
    return manager.coordinator.single_type_managers[0]  # the source group (driver's layout)


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, each breaking what one check sees (built on first
    use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class FailedImportCompleted(KVCacheManager):  # a failed import taken as done: its pages
        def allocate_slots(self, *args, **kwargs):  # ready, published unwritten
            coordinator = _source(self).coordinator
            if coordinator is not None and "finish_host_import" not in vars(coordinator):
                finish = coordinator.finish_host_import
                coordinator.finish_host_import = lambda rid, failed: finish(rid, failed=False)
            return super().allocate_slots(*args, **kwargs)

    class ImportPinsKept(KVCacheManager):  # a finished import keeps a reference on each of
        def allocate_slots(self, *args, **kwargs):  # its host blocks (a leak)
            source = _source(self)
            coordinator = source.coordinator
            if coordinator is not None and "finish_host_import" not in vars(coordinator):
                finish = coordinator.finish_host_import

                def pinned(rid, failed):
                    finish(rid, failed=failed)
                    source.block_pool.touch(source.req_to_blocks.get(rid, []))
                coordinator.finish_host_import = pinned
            return super().allocate_slots(*args, **kwargs)

    class EveryImportedPageResident(KVCacheManager):  # the resident group reserves every
        def __init__(self, *args, **kwargs):  # imported page, not the last alone
            super().__init__(*args, **kwargs)
            resident = self.coordinator.single_type_managers[2]
            reserve = resident.allocate_external_computed_blocks

            def every_page(request_id, local, external, record_for_zeroing=True):
                for end in range(local + resident.block_size, local + external,
                                 resident.block_size):
                    reserve(request_id, 0, end, record_for_zeroing)
                reserve(request_id, local, external, record_for_zeroing)
            resident.allocate_external_computed_blocks = every_page

    class ImportCountsOneMore(KVCacheManager):  # the resident group counts one page more
        def __init__(self, *args, **kwargs):  # for an import: refused where it fits
            super().__init__(*args, **kwargs)
            resident = self.coordinator.single_type_managers[2]
            count = resident.get_num_blocks_to_allocate

            def one_more(request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                         num_local_computed_tokens, *args, **kwargs):
                return count(request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                             num_local_computed_tokens, *args, **kwargs) + \
                    (total_computed_tokens > num_local_computed_tokens)
            resident.get_num_blocks_to_allocate = one_more

    class HeldPagesFreedForward(broken_manager()):  # a finished request's held pages freed
        @staticmethod  # first page first once its last write-back completes (vLLM's
        def break_(coordinator):  # `_publish_detached_blocks` passes them `reversed`)
            pool, publish = coordinator.host_manager.block_pool, coordinator._publish_detached_blocks
            free, releasing = pool.free_blocks, []

            def forward(blocks):
                free(list(blocks)[::-1] if releasing else blocks)

            def held_release(state):
                releasing.append(state)
                try:
                    publish(state)
                finally:
                    releasing.pop()
            pool.free_blocks = forward
            coordinator._publish_detached_blocks = held_release

    class ImportBlocksReversed(KVCacheManager):  # the source group's blocks for an import's
        def __init__(self, *args, **kwargs):  # external pages taken from the host queue's
            super().__init__(*args, **kwargs)  # head and placed in its table last first
            source = _source(self)
            allocate = source.allocate_external_computed_blocks

            def reversed_pages(request_id, *args, **kwargs):
                blocks = source.req_to_blocks[request_id]
                held = len(blocks)
                allocate(request_id, *args, **kwargs)
                blocks[held:] = blocks[held:][::-1]
            source.allocate_external_computed_blocks = reversed_pages

    return {cls.__name__: cls for cls in (FailedImportCompleted, ImportPinsKept,
                                          EveryImportedPageResident, ImportCountsOneMore,
                                          HeldPagesFreedForward, ImportBlocksReversed)}


def __getattr__(name):  # a double by import path
    if name in ("FailedImportCompleted", "ImportPinsKept", "EveryImportedPageResident",
                "ImportCountsOneMore", "HeldPagesFreedForward", "ImportBlocksReversed"):
        return doubles()[name]
    raise AttributeError(name)


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken, label, index", [
    # (a failed import taken as done: its pages ready, so its load's report publishes them;
    # since 2026-12-08 the host cache map on the import's ops catches that at index 0, op 35;
    # from 2026-12-07 the order of the finish's frees, `hisparse_order.py`, caught it at op
    # 45 (its pages clean, so the finish unpins them to the tail where the release frees them
    # to the head); before, a later trace's page published early was the first catch)
    (f"{__name__}:FailedImportCompleted", "host cache map", 0),
    (f"{__name__}:ImportPinsKept", "host pool", 0),
    (f"{__name__}:EveryImportedPageResident", "import table", 0),
    (f"{__name__}:ImportCountsOneMore", "None vs success", 0),
    # (the import's host blocks taken from the queue's head, placed last first: judged since
    # 2026-12-08, the admission's pops, `hisparse_queue.py`; at index 1, op 172, which the
    # judge before it let agree to the trace's end: its tables' blocks are distinct and free)
    (f"{__name__}:ImportBlocksReversed", "which blocks", 1),
    ("mutant.vllm.kvmanager.hisparse_import_covers_hit_only", "published late", 0),
    ("mutant.vllm.kvmanager.external_on_null_block", "import table", 0),
    ("mutant.vllm.kvmanager.delayed_load_cached", "cached before the load", 0),
], ids=lambda value: str(value).rsplit(".", 1)[-1].rsplit(":", 1)[-1])
def test_each_import_check_catches_a_broken_manager(broken, label, index):
    found = next(d for d in (divergence("kvmanager", hisparse_import.GENERATOR.generate(0, i),
                                        broken) for i in range(index, index + 20)) if d)
    assert found.what.startswith(label), found.report()


def test_an_imports_counts_are_the_released_groups():
    """`import_counts` on plain data (no vLLM): blocks of 4, a retained host hit of 3 blocks
    (block 9 free on the host), an indexer hit of 1 block (free on the device), an import up to
    10 tokens (3 pages), the step's 10 slots or the whole request's 21."""
    from kvfuzz.fuzz.kvmanager.hisparse_checks import HOT_BLOCKS, import_counts

    host_ref, device_ref = [0] * 12, [0] * 12
    host_ref[7] = host_ref[8] = 1
    counts = dict(end=10, size=4, source=[7, 8, 9, 11], indexer=[5], host_ref=host_ref,
                  device_ref=device_ref)
    # the indexer 2 new + 1 free hit block, the resident group the last imported page alone,
    # the hot region; on the host the retained hit cut to 3 pages covers them, block 9 free
    assert import_counts(10, **counts) == (3 + 1 + HOT_BLOCKS, 1)
    # the whole request: 6 pages; the indexer 5 + 1, the resident 1 + 3 past the import
    assert import_counts(21, **counts) == (6 + 4 + HOT_BLOCKS, 3 + 1)


@_ENGINE[0]
@_ENGINE[1]
def test_an_import_undercounted_for_the_whole_request_is_admitted_where_it_does_not_fit():
    """`kvfuzz mutate`'s single-type manager line 2501, `cdiv(num_tokens, b) - max(imported,
    existing)` as `>>`: the resident group counts almost nothing past an import, so the whole
    request's check admits what does not fit; killed by the exact admission of an import at
    the profile's index 16 (the mix's first 200 do not reach it)."""
    from kvfuzz.fuzz.engine.target import AGREE
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER
    from tests.kvmanager.test_single_type_mutants import placed

    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    trace = hisparse_import.GENERATOR.generate(0, 16)
    assert KVMANAGER.check(trace, vllm).status == AGREE
    module = "vllm.v1.core.single_type_kv_cache_manager"
    with placed(f"{module}:2501:50:ReplaceBinaryOperator_Sub_RShift:57", module):
        outcome = KVMANAGER.check(trace, vllm)
    assert outcome.divergence.what.startswith("None vs success"), outcome
