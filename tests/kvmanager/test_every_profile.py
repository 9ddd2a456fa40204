"""Every `kvmanager` generator profile on its own seeded stream (`KVMANAGER.alone`, what
`kvfuzz diff kvmanager --profile NAME` runs) through the released vLLM 0.33.0 `KVCacheManager`,
each trace to its last op: PER_PROFILE traces of each, in shards of SHARD (pytest -n spreads
them). In place of seeded traces of the mix, whose index draws the profile (the rarest, "no
caching", is 3% of it): here each profile gets the same count. From index START, past the
indices the stream tests of `test_upstream.py` run, so no trace runs twice. Why PER_PROFILE and
not 2,000: `docs/upstream-vllm.md`, "Speed" (CI's 30 minutes). The two traces found past them
(SETTLED) run on their own. Skips without vLLM."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.impl.kvmanager import RELEASED
from tests.helpers import fail_with, needs_engine

pytestmark = needs_engine("vllm")  # and the slow tier
PER_PROFILE, SHARD, START = 1000, 250, 1000
# Found past the shards with 1,500 of each profile, the check's fault (boundary.py's
# `evicted_tail`): (profile, index)
SETTLED = (("mamba align", 2268), ("mamba align", 2306))
SHARDS = [(profile, shard) for profile in KVMANAGER.profiles()
          for shard in range(PER_PROFILE // SHARD)]


@pytest.mark.parametrize("profile, shard", SHARDS,
                         ids=[f"{profile.replace(' ', '_')}-{shard}"
                              for profile, shard in SHARDS])
def test_each_profiles_seeded_traces_run_to_their_last_op_on_vllm(profile, shard):
    release = KVMANAGER.catalogue.resolve(RELEASED)
    assert release.name == "vllm.kvmanager"
    stream = KVMANAGER.alone(profile).generator
    first = START + shard * SHARD
    for index in range(first, first + SHARD):
        trace = stream.generate(0, index)
        assert trace.note == f"profile {profile}"
        outcome = KVMANAGER.check(trace, release)
        if outcome.status != AGREE:
            assert outcome.divergence is not None, (index, outcome.outside)
            fail_with(outcome.divergence)


@pytest.mark.parametrize("profile, index", SETTLED)
def test_the_traces_the_check_was_wrong_on_run_to_their_last_op(profile, index):
    """Found past the indices above with 1,500 of each profile (docs/upstream-vllm.md, "Speed"):
    the release offered the copy of a partial tail whose entry `evict_blocks` had dropped."""
    release = KVMANAGER.catalogue.resolve(RELEASED)
    trace = KVMANAGER.alone(profile).generator.generate(0, index)
    outcome = KVMANAGER.check(trace, release)
    if outcome.status != AGREE:
        fail_with(outcome.divergence)

