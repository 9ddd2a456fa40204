"""`kvfuzz mutate kvmanager --scope vllm.v1.core.single_type_kv_cache_manager` (issue 25): the
survivors of its seed-0 sample that were reach gaps of the seeded mix or properties it lacked, and
the 5 that only vLLM's own tests killed (Mamba's prefill checkpoint blocks), are killed on the
seeded case that reaches them now, and the ones declared equivalent are declared. Each mutant is
put in place in this process as `kvfuzz mutate` puts it (`placing.place`), and taken out after.
Skips without vLLM."""

from __future__ import annotations

import contextlib
import importlib

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager import hybrid, streams
from tests.helpers import needs_engine

pytestmark = needs_engine("vllm")  # (slow: it imports vLLM)
MODULE = "vllm.v1.core.single_type_kv_cache_manager"


@contextlib.contextmanager
def placed(mutant_id: str, module_name: str = MODULE):
    """The released module (`module_name`, the single-type managers' by default) with
    `mutant_id` in place of its function's code, then restored."""
    from kvfuzz.fuzz.engine.mutation import placing
    from kvfuzz.fuzz.engine.mutation.mutants import apply, enumerate_mutants
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import(module_name):
        module = importlib.import_module(module_name)
    source = open(module.__file__).read()
    mutant = next(m for m in enumerate_mutants(module_name, module.__file__, source)
                  if m.id == mutant_id)
    saved = {key: f.__code__ for key, f in placing.live_functions(module).items()}
    original = placing.functions(compile(source, module.__file__, "exec"))
    assert placing.place(module, original, apply(source, mutant)[0])
    try:
        yield
    finally:
        for key, function in placing.live_functions(module).items():
            function.__code__ = saved[key]


# (mutant, the seeded index of seed 0 that kills it): MambaManager's, on "mamba align" traces
# of the mix's second share (index 126) or its first (22, 86, 91).
KILLED = [
    # scale_factor = block_size & hash_block_size: zero for two powers of two, and the hit's
    # block index divides by it (a crash at the first Mamba hit inside a block; index 60 since
    # has speculative blocks, and no such hit)
    (f"{MODULE}:1504:38:ReplaceBinaryOperator_FloorDiv_BitAnd:19", 22),
    # num_tokens = (fine_idx + 1) // hash_block_size: the hit's length in hash units, not
    # tokens (the same at hash block 1: index 126 hashes per 2 tokens)
    (f"{MODULE}:1509:44:ReplaceBinaryOperator_Mul_FloorDiv:22", 126),
    # Mamba's get_num_blocks_to_allocate adding the table's length: a block counted for a
    # decode that needs none, refused in a full pool (the reduced mode's refusal check,
    # fuzz/kvmanager/align_refusal.py)
    (f"{MODULE}:1746:16:ReplaceBinaryOperator_Sub_Add:40", 86),
    # Mamba "align"'s prefill checkpoint blocks (`Trace.mamba_checkpoint`), the 5 mutants
    # only vLLM's own tests killed before: a checkpoint taken only at table position 0 (the
    # kept-state rule: a checkpoint block missing); one on a speculative block skipped (the
    # same, with `Trace.mamba_speculative`); the bound of a checkpoint step's new blocks as
    # `(1 + partial) | checkpoint` (vLLM's own assertion); the checkpoint index's assertion
    # inverted; `reachable_block_mask` given a float end under retention 0 (a TypeError)
    (f"{MODULE}:1681:31:ReplaceComparisonOperator_GtE_Eq:9", 22),
    (f"{MODULE}:1687:54:ReplaceBinaryOperator_Sub_Pow:38", 91),
    (f"{MODULE}:1875:58:ReplaceBinaryOperator_Add_BitOr:25", 22),
    (f"{MODULE}:2040:21:ReplaceComparisonOperator_LtE_Gt:7", 22),
    (f"{MODULE}:2059:30:ReplaceBinaryOperator_Add_Div:27", 22),
    # Mamba's reachable_block_mask keeping the replay boundary's state at `b % alignment *
    # alignment`: under retention 0 the state a resend resumes from is not cached (the reduced
    # mode's retention check, fuzz/kvmanager/align_retention.py, with the scheduler's cut)
    (f"{MODULE}:1601:38:ReplaceBinaryOperator_FloorDiv_Mod:25", 22),
    # Mamba's block-aligned lookup (hashed per block) probing too few blocks, `max_length >>
    # block_size`, or none, its range stepping up: a hit short or none, well-formed, so only
    # the hit's length (`oracle/kvmanager/align_hit.py`) sees it; the mix's first "mamba
    # align" trace hashed per block with a hit that reaches it is 248 (71 has none)
    (f"{MODULE}:1522:36:ReplaceBinaryOperator_FloorDiv_RShift:22", 248),
    (f"{MODULE}:1524:47:ReplaceUnaryOperator_Delete_USub:8", 248),
]


def test_the_mix_reaches_mamba_align_lookups_in_its_first_200():
    indices = [i for i in range(200) if streams.GENERATOR.stream(0, i) is hybrid.MAMBA_ALIGN]
    assert len(indices) >= 10 and {60, 86, 126} <= set(indices)


@pytest.mark.parametrize("mutant, index", KILLED)
def test_a_fine_grained_mamba_lookup_mutant_is_killed(mutant, index):
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    trace = streams.GENERATOR.generate(0, index)
    assert KVMANAGER.check(trace, vllm).status == AGREE  # the release runs it clean
    with placed(mutant):
        outcome = KVMANAGER.check(trace, vllm)
    assert outcome.status != AGREE, mutant


# The sample's survivors declared equivalent, each with its reason (impl/equivalent_mutants.json)
DECLARED = ("1063:41:NumberReplacer:139", "1655:48:ReplaceComparisonOperator_NotEq_Eq:12",
            "1853:34:ReplaceComparisonOperator_Lt_IsNot:5",
            "2107:21:ReplaceComparisonOperator_GtE_Is:11",
            "2499:75:ReplaceBinaryOperator_Sub_LShift:56",
            # reached since the "mamba align" profile's checkpoint and speculative blocks
            "471:37:ReplaceComparisonOperator_Is_Eq:0")


@pytest.mark.parametrize("mutant", DECLARED)
def test_the_equivalent_survivors_are_declared(mutant):
    from kvfuzz.fuzz.engine.mutation.run import declared_equivalents

    assert declared_equivalents().get(f"{MODULE}:{mutant}")


def test_the_refusal_check_judges_only_steps_that_need_no_block():
    """`align_refusal.needless_refusal` on plain data (no vLLM): blocks of 4, tables of 3."""
    from kvfuzz.fuzz.kvmanager.align_refusal import needless_refusal, rekeyed

    assert needless_refusal(4, 0, 10, 1, (3, 3), False)  # 11 tokens fit both tables
    assert needless_refusal(4, 0, 12, 1, (3, 3), False) is None  # 13: a new block each
    assert needless_refusal(4, 2, 10, 1, (3, 3), False) is None  # lookahead: full attention's
    assert needless_refusal(4, 0, 10, 1, (3, 3), True) is None  # a copy-on-write pending
    assert needless_refusal(4, 0, 10, 1, None, False) is None
    # with 2 speculative blocks the Mamba table must hold 3 + 2 for 11 tokens
    assert needless_refusal(4, 0, 10, 1, (3, 5), False, speculative=2)
    assert needless_refusal(4, 0, 10, 1, (3, 4), False, speculative=2) is None
    keys = [None, ("h", 1), None, None]
    assert not rekeyed(keys, list(keys), [0, 1, 2]) and rekeyed(keys, [None, None, None, None],
                                                                [1])
