"""Mamba "align" mode with prefix caching (the "mamba align" profile), judged in the reduced mode
of `fuzz/kvmanager/align.py` (the released class runs the seeded traces clean and reaches
partial hits, copy-on-write and prefill checkpoint blocks: `test_every_profile.py`): each
property of that mode catches a broken manager (a mutant of the released source, or a test
double here) on those traces. Skips without vLLM."""

import functools
import re
from dataclasses import replace

import pytest

from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.impl.registry import load_attribute
from kvfuzz.strategies.kvmanager import hybrid
from tests.helpers import divergence, needs_engine, without_align_caching_check

pytestmark = needs_engine("vllm")  # (slow: it imports vLLM)


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class, each breaking what one reduced check sees (built on
    first use, never at collection)."""
    KVCacheManager = load_attribute("vllm.v1.core.kv_cache_manager:KVCacheManager")

    class EvictsNothing(KVCacheManager):
        def evict_blocks(self, block_ids):
            pass

    class ResetAlwaysDone(KVCacheManager):
        def reset_prefix_cache(self):
            super().reset_prefix_cache()
            return True

    class UsageOff(KVCacheManager):
        @property
        def usage(self):
            return self.block_pool.get_usage() + 1 / 1024

    class MambaHitWrongState(KVCacheManager):
        # the Mamba hit's state: full attention's block (the cap passed on: the connector
        # lookup's fallback passes it)
        def get_computed_blocks(self, request, *cap):
            blocks, *rest = super().get_computed_blocks(request, *cap)
            full, mamba = blocks.blocks
            if mamba:
                blocks = type(blocks)((full, mamba[:-1] + full[-1:]))
            return (blocks, *rest)

    class GroupsSwapped(KVCacheManager):
        def allocate_slots(self, *args, **kwargs):
            got = super().allocate_slots(*args, **kwargs)
            return got if got is None else type(got)(got.blocks[::-1])
    return {cls.__name__: cls for cls in (EvictsNothing, ResetAlwaysDone, UsageOff,
                                          GroupsSwapped, MambaHitWrongState)}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_align:EvictsNothing
    if name in ("EvictsNothing", "ResetAlwaysDone", "UsageOff", "GroupsSwapped",
                "MambaHitWrongState"):
        return doubles()[name]
    raise AttributeError(name)


@pytest.mark.parametrize("broken, label", [
    (f"{__name__}:EvictsNothing", "evict"),
    (f"{__name__}:ResetAlwaysDone", "result"),
    (f"{__name__}:UsageOff", "num free"),
    (f"{__name__}:GroupsSwapped", "result"),
    (f"{__name__}:MambaHitWrongState", "prefix hit"),
    ("mutant.vllm.kvmanager.mamba_align_lookahead_state", "mamba states"),
    ("mutant.vllm.kvmanager.mamba_align_state_kept", "mamba states"),
    ("mutant.vllm.kvmanager.mamba_align_checkpoint_not_taken", "mamba states"),
    ("mutant.vllm.kvmanager.mamba_align_checkpoint_every_chunk", "mamba states"),
    ("mutant.vllm.kvmanager.mamba_align_speculative_dropped", "mamba states"),
    ("mutant.vllm.kvmanager.mamba_align_replay_state_dropped", "retention"),
    ("mutant.vllm.kvmanager.free_first_group_only", "mamba states"),
    ("mutant.vllm.kvmanager.hit_not_touched", "ref_cnt"),
    ("mutant.vllm.kvmanager.last_token_hit", "prefix hit"),
    ("mutant.vllm.kvmanager.skip_reading_ignored", "prefix hit"),
    ("mutant.vllm.kvmanager.hybrid_hit_not_trimmed", "prefix hit"),
    ("mutant.vllm.kvmanager.zero_tokens_accepted", "rejection"),
    ("mutant.vllm.kvmanager.mamba_align_hit_short", "prefix hit"),
    ("mutant.vllm.kvmanager.mamba_align_partial_hit_ignored", "prefix hit"),
], ids=lambda value: value.rsplit(".", 1)[-1].rsplit(":", 1)[-1])
def test_each_reduced_check_catches_a_broken_manager(broken, label, monkeypatch):
    # (the traces observing no KV events or stats, as before the profile drew them: the events
    # and stats checks catch some of these first, `skip_reading_ignored` by its stats;
    # test_align_events.py; and the caching check off, which sees a misplaced state's entry
    # first: test_align_caching.py)
    without_align_caching_check(monkeypatch)
    found = next(d for d in (divergence("kvmanager", replace(
        hybrid.MAMBA_ALIGN.generate(0, index), events=False, stats=False), broken)
        for index in range(40)) if d)
    assert found.what.startswith(label), found.report()


# (mutant, the first "mamba align" trace of seed 0 the hit length catches it on)
SHORT_HITS = [("mamba_align_hit_short", 0), ("mamba_align_partial_hit_ignored", 2)]


@pytest.mark.parametrize("name, index", SHORT_HITS, ids=[name for name, _ in SHORT_HITS])
def test_only_the_hit_length_catches_a_well_formed_short_hit(name, index, monkeypatch):
    """A hit a hash block short, or ending at a block boundary below a cached partial state, is
    well-formed (each block cached under the request's hashes): the reduced mode's other checks
    pass it to the trace's last op; the hit length (`oracle/kvmanager/align_hit.py`) catches it,
    stating the length the pool held."""
    from kvfuzz.fuzz.kvmanager.align import AlignLockstep

    trace, broken = hybrid.MAMBA_ALIGN.generate(0, index), f"mutant.vllm.kvmanager.{name}"
    # (index 0 as it was before multi-module MTP's draw of 2026-12-07 gave it k = 3, with
    # which it caches less and makes no hit this mutant shortens: test_mamba_eagle_mtp.py)
    trace = replace(trace, prefill_lookahead=0) if trace.eagle else trace
    found = divergence("kvmanager", trace, broken)
    assert found is not None and re.search(r"prefix hit:? +expected \d+ tokens, actual \d+: "
                                           r"full attention's entries cover \d+",
                                           found.report()), found
    monkeypatch.setattr(AlignLockstep, "_hit_length_problems", lambda *args: [])
    assert divergence("kvmanager", trace, broken) is None
