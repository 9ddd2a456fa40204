"""Each broken vLLM `BlockPool` (the released source with one edit) is caught by the seeded lock
step with a readable, shrunk report that names the op, the field or invariant, and the replay
command; the released class agrees on the shrunk trace. Skips without vLLM."""

import re

import pytest

from kvfuzz.fuzz.blockpool.target import BLOCKPOOL
from kvfuzz.fuzz.engine.shrink import shrink
from kvfuzz.fuzz.engine.target import AGREE
from tests.helpers import loads
from tests.helpers import dumps
from tests.helpers import by_tier, divergence, mutants

PREFIX = "mutant.vllm.blockpool."
EXPECTED = {PREFIX + name: pattern for name, pattern in {
    "freed_uncached_reused_last": r"free queue:? +first difference",
    "freed_cached_reused_first": r"free queue:? +first difference",
    "reuse_keeps_hash": r"block hash:? +block \d+: expected no hash",
    "touch_leaves_on_queue": r"num free:? +expected \d+, actual \d+",
    "touch_counts_twice": r"ref_cnt:? +block \d+: expected \d+, actual \d+",
    "exact_fit_refused": r"None vs success:? +expected blocks \[",
    "null_block_cached": r"block hash:? +block 0: expected no hash|null block \(0\) is cached",
    "lookup_newest_duplicate": r"result:? +get_cached_block",
    "pop_drops_last_duplicate": r"hash map:? +hash \d+ group \d+: expected blocks \[\d+\], "
                                r"actual None",
    "reset_while_held": r"result:? +reset_prefix_cache: expected False, actual True",
    "unpinned_reused_first": r"free queue:? +first difference",
    "evict_spares_held": r"block hash|hash map",
}.items()}


def test_every_mutant_has_an_expectation():
    assert sorted(EXPECTED) == sorted(m.name for m in mutants("blockpool"))


@pytest.mark.parametrize("name", by_tier(sorted(EXPECTED)))
def test_mutant_is_caught_with_a_readable_shrunk_report(name):
    impl = BLOCKPOOL.catalogue.resolve(name)
    if not impl.available():
        pytest.skip("needs vllm installed (see docs/upstream-vllm.md)")
    found = next((d for d in (divergence("blockpool", BLOCKPOOL.generator.generate(0, i, [impl]), impl)
                              for i in range(60)) if d is not None), None)
    assert found is not None, f"{name}: no divergence in 60 seeded traces"
    small = shrink(BLOCKPOOL, found, budget=(3000, 10.0))
    report = small.report()
    assert report.startswith(f"DIVERGENCE  blockpool  implementation {name}")
    assert " at op " in report and "\n  call      " in report
    assert f"kvfuzz replay corpus/blockpool-{small.input.trace_id()}.json --impl {name}" in report
    assert re.search(r"shrunk from generator blockpool/1(\[[^]]+\])?, seed 0", report), report
    assert re.search(EXPECTED[name], report), report
    again = divergence("blockpool", loads(dumps(small.input)), name)
    assert again is not None and again.signature == small.signature
    assert BLOCKPOOL.check(small.input, BLOCKPOOL.catalogue.resolve("vllm.blockpool")).status == AGREE
