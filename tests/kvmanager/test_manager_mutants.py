"""`kvfuzz mutate kvmanager --impl vllm.kvmanager --sample 150 --seed 0` (issue 25): two of its
four survivors are reach gaps of the mix's first 200 cases, not of the properties. Each is
killed on the first index of the profile alone (`--profile`) that reaches it, which the release
runs clean (2026-12-05). The other two (`kv_cache_manager.py` 378 `is not`, 754 `break`) need
a group ordered before full attention: 754 is killed on the "full last" profile (2026-12-06),
which builds that order; 378's `is not` needs it with Mamba "align" and the connector's lookup
too, which that profile leaves out: docs/upstream-vllm.md, "`KVCacheManager`'s survivors".
Skips without vLLM."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from tests.helpers import needs_engine
from tests.kvmanager.test_single_type_mutants import placed

pytestmark = needs_engine("vllm")  # (slow: it imports vLLM)
MODULE = "vllm.v1.core.kv_cache_manager"

KILLED = [
    # `num_new_computed_tokens > 1`: a hit of one token (blocks of 1) reported in "full" mode
    # emits no stored events for the block it reuses (the mix's first is past case 200)
    ("313:38:NumberReplacer:28", "observed", 5, "KV events"),
    # `for mgr in []`: a finished request's partial tail is never offered (the mix's first
    # finished tail is its case 332)
    ("917:19:ZeroIterationForLoop:12", "mamba align", 48, "boundary offload"),
    # `continue` as `break` in get_block_ids_for_computed_tokens: behind a group it does not
    # clip (cross attention, Mamba) ordered first, full attention's ids are dropped
    ("754:16:ReplaceContinueWithBreak:3", "full last", 0, "block_ids_for_computed_tokens"),
]


@pytest.mark.parametrize("mutant, profile, index, label", KILLED)
def test_a_manager_survivor_of_the_mix_is_killed_on_its_profile(mutant, profile, index, label):
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    alone = KVMANAGER.alone(profile)
    trace = alone.generator.generate(0, index)
    assert alone.check(trace, vllm).status == AGREE  # the release runs it clean
    with placed(f"{MODULE}:{mutant}", MODULE):
        outcome = alone.check(trace, vllm)
    assert outcome.status != AGREE and outcome.divergence.what.startswith(label), \
        outcome.divergence and outcome.divergence.report()
