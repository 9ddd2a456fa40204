"""`kvfuzz mutate kvmanager --impl vllm.kvmanager --sample 150 --seed 0` (issue 25): two of its
four survivors are reach gaps of the mix's first 200 cases, not of the properties. Each is
killed on the first index of the profile alone (`--profile`) that reaches it, which the release
runs clean (2026-12-05). The other two (`kv_cache_manager.py` 378 `is not`, 754 `break`) need
a group ordered before full attention, which the "full last" profile builds (2026-12-06): 754
is killed on its first trace; 378's `is not` needs the Mamba "align" group first and both
groups hitting exactly as deep past 256 tokens, which its "align" kind reaches first at index 4
(the connector's lookup flags a lag that is not there). The same edit is also caught on a
hand-made pair of requests through the driver (below): docs/upstream-vllm.md, "`KVCacheManager`'s
survivors". Skips without vLLM."""

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
    # `min(per_group_hits) is not num_local`: the Mamba group first, both hitting 264 tokens
    # (distinct ints past 256), `min` returns the Mamba group's: flagged with no lag
    ("378:57:ReplaceComparisonOperator_Lt_IsNot:0", "full last", 4, "prefix hit"),
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


# 378's `<` as `is not` in get_computed_blocks_for_connector's per-group branch: it differs only
# where a group ordered before full attention (a Mamba "align" group, as Qwen3-Next's layer 0
# makes it) hits exactly as deep past 256 tokens (`min` returns the first of equal values;
# CPython shares ints up to 256 only). Killed by a seeded trace above; here the lookup's own rule
# (`align_connector.expectation`) judges it on a hand-made pair of requests (written before the
# profile reached it, kept: the smallest case): a 320-token prompt computed and freed, then one
# sharing it, both groups hitting all 320 tokens.
IS_NOT = "378:57:ReplaceComparisonOperator_Lt_IsNot:0"


def _mamba_first_lookup(full_last: bool):
    from kvfuzz.fuzz.kvmanager import align_connector
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver
    from kvfuzz.strategies.kvmanager.hashing import chain

    driver = KVManagerDriver(KVMANAGER.catalogue.resolve("vllm.kvmanager").load(), 200, 16, 0,
                             2048, mamba_mode="align", full_last=full_last)
    prompt = list(range(1, 321))
    driver.arrive(1, prompt)
    assert driver.get_computed_blocks(1)[1] == 0
    assert driver.allocate_slots(1, len(prompt), 0, True) is not None
    driver.set_computed(1, len(prompt), "running")
    driver.free(1)
    tokens = prompt + [7] * 20
    driver.arrive(2, tokens)
    # the pool's cache entries by the trace's group ids (full attention 0, as the rule reads)
    cached = {(key, 1 - group if full_last else group): blocks
              for (key, group), blocks in driver.cache_map().items()}
    expected = align_connector.expectation(False, chain(tokens, 16), len(tokens), 16, 16, cached)
    assert expected[0] == align_connector.AGREED and expected[1] == 320
    return align_connector.lookup_problems(expected, driver.connector_lookup(2), None)


def test_the_is_not_survivor_is_caught_where_the_mamba_group_comes_first():
    assert _mamba_first_lookup(full_last=True) == []  # the release
    with placed(f"{MODULE}:{IS_NOT}", MODULE):
        problems = _mamba_first_lookup(full_last=True)
        assert _mamba_first_lookup(full_last=False) == []  # full attention first: no difference
    assert problems and "hit_diverged False" in problems[0][1], problems
