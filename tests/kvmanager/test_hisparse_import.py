"""A second connector's imports into HiSparse's host pool (the "hisparse import" profile),
judged by `fuzz/kvmanager/hisparse_import.py` (the released class runs the seeded traces clean:
`test_every_profile.py`): each of its checks catches a broken manager (a catalogue mutant of
the released source, or a test double here) on the profile's first traces. Skips without
vLLM."""

import functools

import pytest

from kvfuzz.strategies.kvmanager import hisparse_import
from tests.helpers import divergence, needs_engine


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

    return {cls.__name__: cls for cls in (FailedImportCompleted, ImportPinsKept,
                                          EveryImportedPageResident)}


def __getattr__(name):  # a double by import path
    if name in ("FailedImportCompleted", "ImportPinsKept", "EveryImportedPageResident"):
        return doubles()[name]
    raise AttributeError(name)


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken, label, index", [
    (f"{__name__}:FailedImportCompleted", "published early", 0),
    (f"{__name__}:ImportPinsKept", "host pool", 0),
    (f"{__name__}:EveryImportedPageResident", "import table", 0),
    ("mutant.vllm.kvmanager.hisparse_import_covers_hit_only", "published late", 0),
    ("mutant.vllm.kvmanager.external_on_null_block", "import table", 0),
    ("mutant.vllm.kvmanager.delayed_load_cached", "cached before the load", 0),
], ids=lambda value: str(value).rsplit(".", 1)[-1].rsplit(":", 1)[-1])
def test_each_import_check_catches_a_broken_manager(broken, label, index):
    found = next(d for d in (divergence("kvmanager", hisparse_import.GENERATOR.generate(0, i),
                                        broken) for i in range(index, index + 20)) if d)
    assert found.what.startswith(label), found.report()
