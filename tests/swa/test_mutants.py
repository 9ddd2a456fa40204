"""Each broken SWA allocator (ours and upstream's source with one edit) is caught by the seeded
lock step with a readable, shrunk report that names the op, the field or invariant, and the
replay command; what the mutant was made from agrees on the shrunk trace."""

import re

import pytest

from kvfuzz.fuzz.engine.shrink import shrink
from kvfuzz.fuzz.swa.target import SWA
from kvfuzz.fuzz.engine.target import AGREE
from tests.helpers import loads
from tests.helpers import dumps
from tests.helpers import by_tier, divergence, mutants

EXPECTED = {
    "mutant.swa.decode_unchecked": r"(full|swa)_available_size|lost",
    "mutant.swa.evict_keeps_mapping": r"mapping +\d+ full slots map differently",
    "mutant.swa.continues_from_full_slot": r"mapping|another in-page offset",
    "mutant.swa.segment_unmaps_first_slot": r"mapping +\d+ full slots map differently",
    "mutant.swa.group_releases_at_once": r"swa_available_size",
    "mutant.swa.clear_keeps_mapping": r"what +mapping at op \d+ of \d+: clear",
    "mutant.sglang.swa.extend_untranslated": r"mapping|another in-page offset",
    "mutant.sglang.swa.release_keeps_padding": r"page 0|crash",
    "mutant.sglang.swa.clear_keeps_mapping": r"what +mapping at op \d+ of \d+: clear",
    "mutant.sglang.swa.group_skips_full_side": r"full_available_size",
    "mutant.sglang.swa.segment_unmaps_representatives": r"mapping +\d+ full slots map",
    "mutant.swa.tail_mapped_from_the_start": r"mapping +\d+ full slots map differently",
    "mutant.sglang.swa.tail_mapped_from_the_start": r"mapping +\d+ full slots map differently",
}


def test_every_mutant_has_an_expectation():
    assert sorted(EXPECTED) == sorted(m.name for m in mutants("swa"))


@pytest.mark.parametrize("name", by_tier(sorted(EXPECTED)))
def test_mutant_is_caught_with_a_readable_shrunk_report(name):
    impl = SWA.catalogue.resolve(name)
    if not impl.available():
        pytest.skip("needs upstream sglang installed (see docs/upstream-sglang.md)")
    found = next((d for d in (divergence("swa", SWA.generator.generate(0, i, [impl]), impl)
                              for i in range(60)) if d is not None), None)
    assert found is not None, f"{name}: no divergence in 60 seeded traces"
    small = shrink(SWA, found, budget=(3000, 10.0))
    report = small.report()
    assert report.startswith(f"DIVERGENCE  swa  implementation {name}")
    assert " at op " in report and "\n  call      " in report
    assert f"kvfuzz replay corpus/swa-{small.input.trace_id()}.json --impl {name}" in report
    assert re.search(r"shrunk from generator swa/2(\[[^]]+\])?, seed 0", report), report
    assert re.search(EXPECTED[name], report), report
    assert len(small.input.ops) <= 12, report
    again = divergence("swa", loads(dumps(small.input)), name)
    assert again is not None and again.signature == small.signature
    original = "sglang.swa" if ".sglang." in name else "swa.torch"
    assert SWA.check(small.input, SWA.catalogue.resolve(original)).status == AGREE
