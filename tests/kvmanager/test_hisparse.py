"""HiSparse's groups (the "hisparse" profile), judged in the reduced mode of
`fuzz/kvmanager/hisparse.py` (the released class runs the seeded traces clean and reaches
retained host hits and write-backs: `test_every_profile.py`): each property of that mode
catches a broken manager (a mutant of the released source, or a test double here) on those
traces; a trace that mixes HiSparse with another group's setting is refused in one line. Skips
without vLLM but the codec's test."""

import functools

import pytest

from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec, hisparse
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import divergence, needs_engine


def _source(manager):
    return manager.coordinator.single_type_managers[0]  # the source group (driver's layout)


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, each breaking what one reduced check sees (built on
    first use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class NeverPublishes(KVCacheManager):  # the host pages' hashes never published
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            _source(self).publish_blocks = lambda *args, **kwargs: None

    class HostBlocksKept(KVCacheManager):  # a freed request's host blocks never go back
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            source = _source(self)
            source.free = source.pop_blocks_for_free

    class IndexerHitShort(KVCacheManager):  # the indexer's hit a block short
        def get_computed_blocks(self, request, *args):
            blocks, *rest = super().get_computed_blocks(request, *args)
            groups = list(blocks.blocks)
            if groups[1]:
                groups[1] = groups[1][:-1]
                blocks = type(blocks)(tuple(groups))
            return (blocks, *rest)

    class EvictsNothing(KVCacheManager):
        def evict_blocks(self, block_ids):
            pass

    class HotRegionShort(KVCacheManager):  # a hot region of one block, not the spec's two
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.coordinator.single_type_managers[3].blocks_per_request = 1

    class RefusesHits(KVCacheManager):  # every admission with a hit refused, room or not
        def allocate_slots(self, request, num_new_tokens, num_new_computed_tokens=0,
                           *args, **kwargs):
            if num_new_computed_tokens:
                return None
            return super().allocate_slots(request, num_new_tokens, num_new_computed_tokens,
                                          *args, **kwargs)

    class RefusesSteps(KVCacheManager):  # every step of a running request refused
        def allocate_slots(self, request, *args, **kwargs):
            if request.num_computed_tokens:
                return None
            return super().allocate_slots(request, *args, **kwargs)

    class ResetsOnePool(KVCacheManager):  # a reset of the device pool only, not the host's
        def reset_prefix_cache(self):
            return self.block_pool.reset_prefix_cache()

    return {cls.__name__: cls for cls in (NeverPublishes, HostBlocksKept, IndexerHitShort,
                                          EvictsNothing, HotRegionShort, RefusesHits,
                                          RefusesSteps, ResetsOnePool)}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_hisparse:NeverPublishes
    if name in ("NeverPublishes", "HostBlocksKept", "IndexerHitShort", "EvictsNothing",
                "HotRegionShort", "RefusesHits", "RefusesSteps", "ResetsOnePool"):
        return doubles()[name]
    raise AttributeError(name)


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken, label", [
    (f"{__name__}:NeverPublishes", "published late"),
    (f"{__name__}:HostBlocksKept", "host pool"),
    (f"{__name__}:IndexerHitShort", "prefix hit"),
    (f"{__name__}:EvictsNothing", "evict"),
    (f"{__name__}:HotRegionShort", "hot region"),
    (f"{__name__}:RefusesHits", "None vs success"),
    (f"{__name__}:RefusesSteps", "refusal"),
    (f"{__name__}:ResetsOnePool", "reset"),
    ("mutant.vllm.kvmanager.hisparse_retained_hit_kept", "retained hit"),
    ("mutant.vllm.kvmanager.hisparse_published_before_durable", "published early"),
], ids=lambda value: value.rsplit(".", 1)[-1].rsplit(":", 1)[-1])
def test_each_reduced_check_catches_a_broken_manager(broken, label):
    found = next(d for d in (divergence("kvmanager", hisparse.GENERATOR.generate(0, index),
                                        broken) for index in range(20)) if d)
    assert found.what.startswith(label), found.report()


@pytest.mark.parametrize("setting", [{"window": 4}, {"caching": False}, {"stats": True},
                                     {"events": True}])
def test_hisparse_with_another_groups_setting_is_refused_in_one_line(setting):
    data = to_json(hisparse.GENERATOR.generate(0, 0)) | setting
    with pytest.raises(FormatError, match="field .hisparse.: expected 0 with"):
        codec.from_json(data)
