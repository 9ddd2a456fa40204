"""Which blocks are cached beside a Mamba "align" group with a KV connector
(`fuzz/kvmanager/align_caching_external.py`): the cached counts an admission with external
tokens leaves (`oracle/kvmanager/align_caching.external_counts`, without vLLM), and, on the
"mamba connector" profile's traces, each op's prediction failing for a manager broken there:
the admission's counts, a load's admission caching (the release's delay dropped), the load
done's `cache_blocks` (the catalogue's `mamba_align_load_caches_token_short`, which only this
check sees on its trace), the resumed step's counts, a failed load's free and the finish's
`remove_skipped_blocks` (no entry moves). Slow where it imports vLLM."""

import functools

import pytest

from kvfuzz.oracle.kvmanager import align_caching as rule
from kvfuzz.strategies.kvmanager import mamba_connector
from tests.helpers import divergence, double, needs_engine, without_align_caching_check


def test_an_external_admissions_counts_are_its_tables_length_after_the_hit():
    # blocks of 4: a hit of 8 tokens (2 blocks each group) and 5 external tokens: full
    # attention's count its hit blocks; the Mamba group's the 12 skipped tokens' 3 nulls
    assert rule.external_counts((2, 2), 13, 4) == [2, 3]
    # no hit: the Mamba group's skipped blocks alone; a one-token load skips none
    assert rule.external_counts((0, 0), 9, 4) == [0, 2]
    assert rule.external_counts((0, 0), 1, 4) == [0, 0]
    # the Mamba hit past the skipped ones (a hit ending on a block: c - 1 inside the last)
    assert rule.external_counts((3, 3), 12, 4) == [3, 3]


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)
CAUGHT = "which blocks cached"


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, each breaking one thing the check predicts (built on
    first use, never at collection)."""
    from kvfuzz.impl.registry import load_attribute

    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")
    Full = load_attribute("vllm.v1.core.single_type_kv_cache_manager:FullAttentionManager")
    Mamba = load_attribute("vllm.v1.core.single_type_kv_cache_manager:MambaManager")

    def manager(self, kind):
        return next(m for m in self.coordinator.single_type_managers if isinstance(m, kind))

    class AdmissionCountHigh(KVCacheManager):  # an admission's full attention count a block on
        def allocate_slots(self, request, *args, **kwargs):
            got = super().allocate_slots(request, *args, **kwargs)
            if got is not None and kwargs.get("num_external_computed_tokens"):
                manager(self, Full).num_cached_block[request.request_id] += 1
            return got

    class ResumedCountHigh(KVCacheManager):  # the load done's count a block on
        def cache_blocks(self, request, num_computed_tokens):
            super().cache_blocks(request, num_computed_tokens)
            manager(self, Full).num_cached_block[request.request_id] += 1

    class FreeEvicts(KVCacheManager):  # a failed load's request freed, its entries evicted
        def free(self, request):
            if request.status.name == "WAITING_FOR_REMOTE_KVS":
                for blocks in self.coordinator.get_blocks(request.request_id):
                    for block in blocks:
                        if not block.is_null:
                            self.block_pool._maybe_evict_cached_block(block)
            super().free(request)

    class SkippedEvicts(KVCacheManager):  # the states remove_skipped_blocks frees, evicted
        def remove_skipped_blocks(self, request_id, *args, **kwargs):
            blocks = manager(self, Mamba).req_to_blocks.get(request_id, [])
            before = [b for b in blocks if not b.is_null]
            super().remove_skipped_blocks(request_id, *args, **kwargs)
            for block in before:
                if block not in blocks:
                    self.block_pool._maybe_evict_cached_block(block)

    return {cls.__name__: cls for cls in (AdmissionCountHigh, ResumedCountHigh, FreeEvicts,
                                          SkippedEvicts)}


def __getattr__(name: str):
    if name in ("AdmissionCountHigh", "ResumedCountHigh", "FreeEvicts", "SkippedEvicts"):
        return doubles()[name]
    raise AttributeError(name)


# each double's "mamba connector" trace of seed 0 (the first that catches it) and the op
# the report names
BROKEN = {"AdmissionCountHigh": (0, "after loaded"), "ResumedCountHigh": (0, "after decode"),
          "FreeEvicts": (1, "after loaded"), "SkippedEvicts": (0, "after removeskipped")}


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_each_prediction_fails_for_a_manager_broken_there(broken):
    index, where = BROKEN[broken]
    found = divergence("kvmanager", mamba_connector.GENERATOR.generate(0, index),
                       double("kvmanager", f"{__name__}:{broken}"))
    assert found is not None and found.what.startswith(CAUGHT), found and found.report()
    assert f"{CAUGHT}: {where}" in found.report(), found.report()


@_ENGINE[0]
@_ENGINE[1]
def test_the_load_done_mutant_is_caught_only_by_this_check(monkeypatch):
    """A load done caching a token short (`mamba_align_load_caches_token_short`: the Mamba
    state of its last token keyed under the hash of the one before) is caught on the profile's
    first trace, and with the check off survives it."""
    name = "mutant.vllm.kvmanager.mamba_align_load_caches_token_short"
    trace = mamba_connector.GENERATOR.generate(0, 0)
    found = divergence("kvmanager", trace, name)
    assert found is not None and found.what.startswith(CAUGHT), found
    without_align_caching_check(monkeypatch)
    assert divergence("kvmanager", trace, name) is None


@_ENGINE[0]
@_ENGINE[1]
def test_a_loads_admission_caching_at_once_is_caught_here_too(monkeypatch):
    """`delayed_load_cached` (an asynchronous load's blocks cached at admission): the
    connector's own check (`align_external.external_problems`) reports it first; with that one
    off, this check still sees the entries."""
    from kvfuzz.fuzz.kvmanager.align import AlignLockstep

    monkeypatch.setattr(AlignLockstep, "external_problems", lambda *args: [])
    found = divergence("kvmanager", mamba_connector.GENERATOR.generate(0, 0),
                       "mutant.vllm.kvmanager.delayed_load_cached")
    assert found is not None and found.what.startswith(CAUGHT), found and found.report()
