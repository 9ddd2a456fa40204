"""Each broken vLLM `KVCacheManager` (and its parts) (the released source with one edit) is caught by the seeded lock
step with a readable, shrunk report that names the op, the field or invariant, and the replay
command; the released class agrees on the shrunk trace. Skips without vLLM."""

import re

import pytest

from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.fuzz.engine.shrink import shrink
from kvfuzz.fuzz.engine.target import AGREE
from tests.helpers import loads
from tests.helpers import dumps
from tests.helpers import by_tier, divergence, mutants

PREFIX = "mutant.vllm.kvmanager."
EXPECTED = {PREFIX + name: pattern for name, pattern in {
    "last_token_hit": r"prefix hit:? +expected \d+ tokens|shared prefix boundary",
    "exact_fit_refused": r"None vs success:? +expected \[",
    # Caching one block more than the table holds: a hash on a block not yet written, or
    # (under sparse retention) vLLM's own mask-length assertion.
    "caches_unwritten_block": r"block hash|hash map|assert block_mask is None",
    "window_moves_early": r"result:? +allocate_slots|block table|free queue|num free|consumed",
    "free_first_group_only": r"num free|ref_cnt|lost",
    "evictable_hits_not_counted": r"Cannot get \d+ free blocks from the pool",
    "free_head_first": r"free queue:? +first difference",
    "hit_not_touched": r"ref_cnt|invariant|consumed",
    "window_keeps_first_block": r"block table|consumed|num free",
    "hybrid_hit_not_trimmed": r"prefix hit:? +expected \d+ tokens",
    "whole_request_unchecked": r"None vs success:? +expected None",
    "sparse_tail_one_block_early": r"block hash|hash map|prefix hit",
    "watermark_for_running": r"None vs success",
    # A reused block keeps its hash: kvfuzz sees the stale hash, or vLLM's own assertion fires
    # when the block is cached again.
    "pool_reuse_keeps_hash": r"block hash:? +block \d+: expected no hash|block_hash_num_tokens",
}.items()}


def test_every_mutant_has_an_expectation():
    assert sorted(EXPECTED) == sorted(m.name for m in mutants("kvmanager"))


@pytest.mark.parametrize("name", by_tier(sorted(EXPECTED)))
def test_mutant_is_caught_with_a_readable_shrunk_report(name):
    impl = KVMANAGER.catalogue.resolve(name)
    if not impl.available():
        pytest.skip("needs vllm installed (see docs/upstream-vllm.md)")
    found = next((d for d in (divergence("kvmanager", KVMANAGER.generator.generate(0, i, [impl]), impl)
                              for i in range(60)) if d is not None), None)
    assert found is not None, f"{name}: no divergence in 60 seeded traces"
    small = shrink(KVMANAGER, found, budget=(3000, 10.0))
    report = small.report()
    assert report.startswith(f"DIVERGENCE  kvmanager  implementation {name}")
    assert " at op " in report and "\n  call      " in report
    assert f"kvfuzz replay corpus/kvmanager-{small.input.trace_id()}.json --impl {name}" in report
    assert re.search(r"shrunk from generator kvmanager/3(\[[^]]+\])?, seed 0", report), report
    assert re.search(EXPECTED[name], report), report
    again = divergence("kvmanager", loads(dumps(small.input)), name)
    assert again is not None and again.signature == small.signature
    assert KVMANAGER.check(small.input, KVMANAGER.catalogue.resolve("vllm.kvmanager")).status == AGREE
