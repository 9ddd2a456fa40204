"""`kvfuzz mutate kvmanager --scope vllm.v1.core.kv_cache_coordinator` (issue 25): the survivors
of its seed-0 sample that were reach gaps of the seeded mix (no "mtp" trace in its first 200, no
"eagle window" hit running up to the hashed tokens' end, no window alone) are killed on the
seeded index of the mix that reaches them now, and the ones declared equivalent or outside the
contract are declared. Each mutant is put in place in this process as `kvfuzz mutate` puts it, and
taken out after (`test_single_type_mutants.placed`). Skips without vLLM, but for the plain-data
check of the admission rule (`align_refusal.needless_admission_refusal`)."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager import hybrid, lone_window, mtp, streams, two_windows
from tests.helpers import with_engine

MODULE = "vllm.v1.core.kv_cache_coordinator"

# (mutant, the seeded index of seed 0's mix that kills it, what the judge reports there)
KILLED = [
    # num_reprefillable_tokens = num_prefill_lookahead ** 1: one token more held back from
    # caching than MTP may re-prefill (a block the release caches left uncached:
    # estimate_cached_tokens 16 for 20, block hash missing), index 11 ("mtp", EAGLE's drop
    # beside a window hashed per token)
    (f"{MODULE}:118:69:ReplaceBinaryOperator_Sub_Pow:4", 11),
    # the unitary coordinator's cacheable tokens num_computed >> num_reprefillable: a quarter
    # of the tokens cached at k = 3 (estimate_cached_tokens 0 for 8, no Stored event), index
    # 25 ("mtp", full attention alone, lookahead hashes)
    (f"{MODULE}:356:42:ReplaceBinaryOperator_Sub_RShift:5", 25),
    # the hybrid coordinator's finalized tokens num_computed | num_reprefillable: a dropping
    # group's peek block cached over re-prefillable tokens (estimate_cached_tokens 20 for 16),
    # index 11
    (f"{MODULE}:797:39:ReplaceBinaryOperator_Sub_BitOr:6", 11),
    # the EAGLE lookup's cap len(block_hashes) ** hash_block_size: a window's lookup runs past
    # the hashed tokens (IndexError in vLLM's hash view), index 53 ("eagle window", a window
    # in blocks of 8 hashed per 2)
    (f"{MODULE}:884:42:ReplaceBinaryOperator_Mul_Pow:4", 53),
    # new_step_starts not passed on to the managers: every Mamba state once cached stays
    # "cached this step", and an admission adopting one is refused for good (the reduced
    # mode's admission check, fuzz/kvmanager/align_refusal.py), index 50 ("mamba align")
    (f"{MODULE}:477:12:RemoveStatement:48", 50),
    # full_attention_group_id with its test negated: a Mamba hybrid's connector lookup sent to
    # the reconciled hit, the lag unflagged (the reduced mode's connector lookup,
    # fuzz/kvmanager/align_connector.py), index 22 ("mamba align")
    (f"{MODULE}:768:34:AddNot:31", 22),
    # the unitary coordinator's `use_eagle = -1 in drop_eagle_group_ids`: the one group's
    # manager caches as without EAGLE (its sparse mask a block early: other blocks cached,
    # estimate_cached_tokens differs at op 1) while its lookup drops a block, so a sibling's hit
    # stops a block short; only a lone window shows it (with full attention alone the bit
    # changes nothing), index 82 ("lone window", EAGLE, retention 0)
    (f"{MODULE}:580:49:NumberReplacer:69", 82),
    # the multi-pass hit search's `eagle_verified.add(idx)` removed: a window group drops
    # EAGLE's block again at every pass, so where the other window cut the candidate its hit
    # loses a scheduler block more; only two groups without full attention take a second pass,
    # index 113 ("two windows", windows of two block sizes, EAGLE)
    (f"{MODULE}:902:20:RemoveStatement:117", 113),
]


@with_engine("vllm")
def test_the_mix_reaches_mtp_and_eagle_window_in_its_first_200():
    """The second shares (2026-12-05): before them seed 0's first 200 held no "mtp" trace."""
    first = [streams.GENERATOR.stream(0, index) for index in range(200)]
    assert [i for i, s in enumerate(first) if s is mtp.GENERATOR] == [11, 25, 54, 81, 100, 194]
    assert {53, 154} <= {i for i, s in enumerate(first) if s is hybrid.EAGLE}
    assert all(streams.GENERATOR.stream(0, index) is streams.generator.GENERATOR
               for index in (0, 1, 2))  # the pinned indices keep their kvmanager/5 traces


@with_engine("vllm")
def test_the_mix_reaches_a_lone_window_in_its_first_200():
    """The "lone window" share (2026-12-05): before it no trace of the mix had a window alone."""
    first = [streams.GENERATOR.stream(0, index) for index in range(200)]
    assert [i for i, s in enumerate(first) if s is lone_window.GENERATOR] == [82, 92, 198]
    assert streams.GENERATOR.generate(0, 82).eagle


@with_engine("vllm")
def test_the_mix_reaches_two_windows_in_its_first_200():
    """The "two windows" share (2026-12-05): before it no trace of the mix took the hybrid hit
    search's second pass with EAGLE."""
    first = [streams.GENERATOR.stream(0, index) for index in range(200)]
    assert [i for i, s in enumerate(first) if s is two_windows.GENERATOR] == \
        [66, 96, 113, 120, 165]
    assert streams.GENERATOR.generate(0, 113).eagle


@with_engine("vllm")
@pytest.mark.parametrize("mutant, index", KILLED)
def test_a_coordinator_survivor_is_killed_where_the_mix_reaches_it(mutant, index):
    from tests.kvmanager.test_single_type_mutants import placed

    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    trace = streams.GENERATOR.generate(0, index)
    assert KVMANAGER.check(trace, vllm).status == AGREE  # the release runs it clean
    with placed(mutant, MODULE):
        outcome = KVMANAGER.check(trace, vllm)
    assert outcome.status != AGREE, mutant


# The connector's lookup in `kv_cache_manager.py` (the `KVCacheManager` sample of 2026-12-05):
# survivors once its hybrid branch was reached, killed on "mamba align" traces of the mix by
# the whole answers of `align_connector.expectation`
MANAGER = "vllm.v1.core.kv_cache_manager"
LOOKUP_KILLED = [
    # a request that skips the cache looked up anyway (the early return removed), index 43
    (f"{MANAGER}:361:12:RemoveStatement:49", 43),
    # the skip's boundary 1 or -1, index 22 (a prompt that skips the cache)
    (f"{MANAGER}:361:50:NumberReplacer:34", 22),
    (f"{MANAGER}:361:50:NumberReplacer:35", 22),
    # the per-group branch's boundary -1, and its flag set with no lag (`<=`), index 7
    (f"{MANAGER}:378:34:NumberReplacer:39", 7),
    (f"{MANAGER}:378:57:ReplaceComparisonOperator_Lt_LtE:0", 7),
    # a hit reported ("full") compared by identity, `is "full"`: the driver's report mode is a
    # string made at run time, as an API request's is (no Stored events then), index 25
    (f"{MANAGER}:315:72:ReplaceComparisonOperator_Eq_Is:0", 25),
]


@with_engine("vllm")
@pytest.mark.parametrize("mutant, index", LOOKUP_KILLED)
def test_a_connector_lookup_survivor_is_killed_on_mamba_align(mutant, index):
    from tests.kvmanager.test_single_type_mutants import placed

    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    trace = streams.GENERATOR.generate(0, index)
    assert trace.mamba_mode == "align" or trace.report
    assert KVMANAGER.check(trace, vllm).status == AGREE
    with placed(mutant, MANAGER):
        outcome = KVMANAGER.check(trace, vllm)
    assert outcome.status != AGREE, mutant


# The lookups' survivors declared equivalent (impl/equivalent_mutants.json)
LOOKUP_DECLARED = ("313:36:ReplaceComparisonOperator_Gt_NotEq:1",
                   "315:72:ReplaceComparisonOperator_Eq_LtE:3",
                   "378:57:ReplaceComparisonOperator_Lt_NotEq:0")


@pytest.mark.parametrize("mutant", LOOKUP_DECLARED)
def test_the_lookups_equivalent_survivors_are_declared(mutant):
    from kvfuzz.fuzz.engine.mutation.run import declared_equivalents

    assert declared_equivalents().get(f"{MANAGER}:{mutant}")


@with_engine("vllm")
def test_a_mamba_state_deeper_than_full_attention_takes_the_reconciled_hit():
    """`kv_cache_manager.py` line 373, the fallback to `get_computed_blocks` removed: where a
    Mamba state lies deeper than full attention's hit the connector's lookup reports full
    attention's own hit (with no state at its end) and boundary 0; the exact lookup check
    expects the reconciled hit and its boundary. Killed at the "mamba align" profile's index 21
    (the mix's first 200 make no such lookup)."""
    from tests.kvmanager.test_single_type_mutants import placed

    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    trace = hybrid.MAMBA_ALIGN.generate(0, 21)
    assert KVMANAGER.check(trace, vllm).status == AGREE
    with placed(f"{MANAGER}:373:12:RemoveStatement:53", MANAGER):
        outcome = KVMANAGER.check(trace, vllm)
    assert outcome.divergence.what.startswith("prefix hit"), outcome


# The sample's survivors declared, each with its reason (impl/equivalent_mutants.json)
DECLARED = ("247:20:NumberReplacer:35", "568:56:NumberReplacer:61", "573:8:RemoveStatement:58",
            "834:42:NumberReplacer:100")


@with_engine("vllm")
@pytest.mark.parametrize("mutant", DECLARED)
def test_the_equivalent_survivors_are_declared(mutant):
    from kvfuzz.fuzz.engine.mutation.run import declared_equivalents

    assert declared_equivalents().get(f"{MODULE}:{mutant}")


def test_the_admission_check_judges_only_a_pool_that_covers_the_worst_count():
    """`needless_admission_refusal` on plain data (no vLLM): blocks of 4, 10 tokens, 2 lookahead
    slots: full attention at most cdiv(12, 4) + 1 = 4, the Mamba group at most 4 more (and its
    speculative blocks), the watermark's blocks on top."""
    from kvfuzz.fuzz.kvmanager.align_refusal import needless_admission_refusal

    assert needless_admission_refusal(4, 10, 2, 0, 0, 8)  # 8 free cover 4 + 4
    assert needless_admission_refusal(4, 10, 2, 0, 0, 7) is None
    assert needless_admission_refusal(4, 10, 2, 2, 0, 9) is None  # 2 speculative: 10 needed
    assert needless_admission_refusal(4, 10, 2, 2, 0, 10)
    assert needless_admission_refusal(4, 10, 2, 0, 3, 10) is None  # a watermark of 3: 11


def test_the_connector_lookup_is_judged_whole():
    """`align_connector` on plain data (no vLLM): hashes per 2 tokens, blocks of 4; hash units
    10 to 15 (12 tokens), a prompt of 13 tokens (a hit never takes the last token)."""
    from kvfuzz.fuzz.kvmanager.align_connector import (AGREED, DEEPER, LAGGING, SKIPPED,
                                                       boundary, expectation, lookup_problems)

    units = [10, 11, 12, 13, 14, 15]
    # full attention's blocks 0 and 1 cached (keyed by units 1 and 3), a Mamba state at 2
    cached = {(11, 0), (13, 0), (10, 1)}
    lag = expectation(False, units, 13, 4, 2, cached)
    assert lag == (LAGGING, 8, 0, True)
    assert expectation(False, units, 13, 4, 2, cached | {(13, 1)}) == (AGREED, 8, 0, False)
    # a state at 12 past full attention's 8: the reconciled hit, 2, with full attention's 8
    # as the boundary of the prefix left uncached
    assert expectation(False, units, 13, 4, 2, cached | {(15, 1)}) == (DEEPER, 2, 8, False)
    assert expectation(False, units, 9, 4, 2, cached)[1] == 8  # the cap: 8 tokens of 9
    assert expectation(False, units, 8, 4, 2, cached)[1] == 4  # 7 of 8: block 0 alone
    assert expectation(True, units, 13, 4, 2, cached) == (SKIPPED, 0, 0, False)
    assert expectation(False, units, 13, 4, 2, {(10, 1)})[:2] == (DEEPER, 0)
    assert boundary(8, 2) == 8 and boundary(8, 8) == 0
    assert lookup_problems(lag, ([[1, 2], [0, 3]], 8, 0, True), None) == []
    assert lookup_problems(lag, ([[1, 2], [0, 3]], 8, 0, False), None)  # the lag unflagged
    assert lookup_problems(lag, ([[1]], 2, 8, False), None)  # the reconciled hit
    assert lookup_problems(lag, ([[1, 2], [0, 3]], 8, 2, True), None)  # a boundary
    skip = (SKIPPED, 0, 0, False)
    assert lookup_problems(skip, ([[], []], 0, 0, False), None) == []
    assert lookup_problems(skip, ([[1], [0]], 0, 0, False), None)  # blocks for a skip
    assert lookup_problems(skip, ([[], []], 0, 1, False), None)  # a boundary of 1
