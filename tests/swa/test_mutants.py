"""Each broken SWA allocator (ours and upstream's source with one edit) is caught by the seeded
lock step with a readable, shrunk report that names the op, the field or invariant, and the
replay command; what the mutant was made from agrees on the shrunk trace."""

from tests.helpers import mutant_tests

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


test_every_mutant_has_an_expectation, test_mutant_is_caught_with_a_readable_shrunk_report = \
    mutant_tests("swa", EXPECTED,
                 lambda name: "sglang.swa" if ".sglang." in name else "swa.torch", max_ops=12)
