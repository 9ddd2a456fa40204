"""Speculative decoding beside HiSparse's groups (since 2026-12-08). Lookahead slots
(`Trace.lookahead`): the scheduler asks `num_lookahead_tokens` more slots at every allocation, and
vLLM 0.33.0 gives them a block in each attention group alike (the source group's on the host, the
indexer's and the resident pages' on the device; none in the hot region or a Mamba "align" group).
The judge's tables, admission counts and refusal bound take them (`hisparse_checks.slots`). EAGLE's
drop (`Trace.eagle`, the four groups alone): the source and indexer groups each look one block past
their cap and drop one, and the hit's exact length is judged with it
(`HostCopies.hit_length_problems`). The codec takes both but beside a second connector's ops, and
EAGLE not beside the Mamba group. "hisparse cow" draws lookahead slots (as many as its
speculative blocks) in half its traces with speculative blocks; "hisparse" lookahead slots in a
quarter, EAGLE in half of those; each last. Each part is shown needed on the release, the
resident pages' slots by a catalogue mutant (equivalent without lookahead), EAGLE's margin by the
catalogue's `eagle_margin_dropped`. Skips without vLLM but the codec's, the plain data's and the
generator's tests."""

import pytest

from kvfuzz.fuzz.kvmanager import hisparse_admission
from kvfuzz.fuzz.kvmanager.hisparse_checks import slots, table_problems
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import capped_hisparse, codec, hisparse, hisparse_cow, \
    hisparse_import
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import divergence, needs_engine

AHEAD = 0  # seed 0's index 0 of "hisparse cow": two lookahead slots, blocks for them from op 1
PLAIN = 1  # index 1: no lookahead (the mutant below is equivalent there)
DECIDED = 55  # index 55: an admission refused for its lookahead slots alone (op 88)
ROOMY = 184  # index 184: a refusal with room for the step but not its lookahead slots
MUTANT = "mutant.vllm.kvmanager.hisparse_resident_lookahead_unbacked"
EAGLE = 1  # "hisparse" index 1: EAGLE and lookahead slots; a hit the drop shortens at op 83


def test_lookahead_beside_hisparse_goes_through_the_codec_but_beside_a_connectors_ops():
    ahead = hisparse_cow.GENERATOR.generate(0, AHEAD)
    assert ahead.lookahead == ahead.mamba_speculative == 2
    assert codec.from_json(to_json(ahead)) == ahead
    plain = to_json(hisparse.GENERATOR.generate(0, 0)) | {"lookahead": 3}
    assert codec.from_json(plain).lookahead == 3  # (HiSparse alone: DeepSeek V3.2's layout)
    imports = next(t for t in (hisparse_import.GENERATOR.generate(0, i) for i in range(20))
                   if any(op.get("op") == "connect" for op in to_json(t)["ops"]))
    with pytest.raises(FormatError, match="field .hisparse.: expected 0 with lookahead with a "
                                          "connector's ops"):
        codec.from_json(to_json(imports) | {"lookahead": 1})


def test_eagle_beside_hisparse_goes_through_the_codec_but_beside_mamba_or_a_connector():
    eagle = hisparse.GENERATOR.generate(0, EAGLE)
    assert eagle.eagle and eagle.lookahead
    assert codec.from_json(to_json(eagle)) == eagle
    cow = to_json(hisparse_cow.GENERATOR.generate(0, AHEAD)) | {"eagle": True}
    with pytest.raises(FormatError, match="field .hisparse.: expected 0 with eagle beside the "
                                          "Mamba group"):
        codec.from_json(cow)
    imports = next(t for t in (hisparse_import.GENERATOR.generate(0, i) for i in range(20))
                   if any(op.get("op") == "connect" for op in to_json(t)["ops"]))
    with pytest.raises(FormatError, match="expected 0 with eagle with a connector's ops"):
        codec.from_json(to_json(imports) | {"eagle": True})


def test_the_tables_cover_the_lookahead_slots_cut_at_the_model_length():
    assert slots(5, 2, 1024) == 7
    assert slots(5, 2, 6) == 6  # cut at max_model_len
    assert slots(7, 2, 6) == 7  # (never below the tokens it holds)
    two = [[1, 2], [3, 4], [0, 5], []]  # 5 tokens and 2 slots in blocks of 4: 2 blocks each
    assert table_problems(0, two, 5, 4, covered=7) == []
    assert table_problems(0, two, 5, 4, covered=5) == []  # (the same blocks)
    (label, text), = table_problems(0, two, 5, 4, covered=9)
    assert label == "block table" and "5 tokens computed and 4 lookahead slots" in text
    # the resident pages' table too: a page short for the lookahead slots
    (label, _), = table_problems(0, [[1, 2], [3, 4], [0], []], 5, 4, covered=7)
    assert label == "block table"


def test_the_profile_draws_lookahead_slots_last_and_only_there():
    traces = [hisparse_cow.GENERATOR.generate(0, i) for i in range(300)]
    ahead = [t for t in traces if t.lookahead]
    assert 60 < len(ahead) < 110  # half of the half with speculative blocks (82 of 300)
    assert all(t.lookahead == t.mamba_speculative for t in ahead)
    # ("capped hisparse" builds on it and draws after it: no lookahead, its traces unchanged)
    assert not any(capped_hisparse.GENERATOR.generate(0, i).lookahead for i in range(40))
    # (the draw comes last: test_hisparse_cow_mamba's test of the last draws)


def test_the_hisparse_profile_draws_speculative_decoding_last():
    """A quarter of "hisparse" traces with lookahead slots (1 to 3), EAGLE in half of those;
    each trace is, but for those fields, the trace before the draw (`build_hisparse`, which
    "hisparse lag", "hisparse import" and "capped hisparse" build on unchanged)."""
    from dataclasses import replace

    from kvfuzz.strategies.sources import seeded_random

    traces = [hisparse.GENERATOR.generate(0, i) for i in range(200)]
    assert 30 < sum(bool(t.lookahead) for t in traces) < 70
    assert 10 < sum(t.eagle for t in traces) < 40
    assert all(t.lookahead in (1, 2, 3) for t in traces if t.lookahead or t.eagle)
    for index, trace in enumerate(traces[:60]):
        before = hisparse.build_hisparse(seeded_random("kvmanager/5[hisparse]", 0, index), 200)
        assert replace(trace, lookahead=0, eagle=False) == before


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)


@_ENGINE[0]
@_ENGINE[1]
def test_the_release_gives_every_attention_group_the_lookahead_slots():
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    outcome = KVMANAGER.check(hisparse_cow.GENERATOR.generate(0, AHEAD),
                              KVMANAGER.catalogue.resolve("vllm.kvmanager"))
    assert outcome.status == "agree", outcome.divergence and outcome.divergence.report()
    assert outcome.features[hisparse_admission.LOOKAHEAD_BLOCKS]


@_ENGINE[0]
@_ENGINE[1]
def test_resident_pages_without_the_lookahead_slots_are_caught_only_with_them():
    """One edit of `HiSparseResidentManager.allocate_new_blocks` (`num_tokens_main_model` for
    `num_tokens`): caught by the resident table's length at index 0's first step past the
    prompt's first chunk (the release clean there: the test above); equivalent on index 1, which
    has no lookahead slots. (Without the resident table's length none of the first 100's 27
    traces with lookahead catches it.)"""
    found = divergence("kvmanager", hisparse_cow.GENERATOR.generate(0, AHEAD), MUTANT)
    assert found is not None and found.what.startswith("block table"), found
    assert "lookahead slots" in found.lines[-1][1], found.report()
    assert divergence("kvmanager", hisparse_cow.GENERATOR.generate(0, PLAIN), MUTANT) is None


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("index, method, label", [
    (DECIDED, "_admission_problems", "None vs success"),
    (ROOMY, "_refusal_problems", "refusal")])
def test_the_counts_need_the_lookahead_slots(monkeypatch, index, method, label):
    """The release is clean on indices 55 and 184; the judge leaving the lookahead slots out of
    the admission's count (55, op 88) expects an admission the release refuses for them, and out
    of the refusal bound (184) calls a refusal roomy that is short by them."""
    trace = hisparse_cow.GENERATOR.generate(0, index)
    assert trace.lookahead and divergence("kvmanager", trace, "vllm.kvmanager") is None
    plain = getattr(hisparse_admission.Admissions, method)

    def without(self, *args):  # (the tables still judged with them)
        self.slots = lambda computed: computed
        try:
            return plain(self, *args)
        finally:
            del self.slots
    monkeypatch.setattr(hisparse_admission.Admissions, method, without)
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what.startswith(label), found


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken", ["judge", "eagle_margin_dropped"])
def test_the_hit_needs_eagles_drop_and_its_margin(monkeypatch, broken):
    """The release is clean on "hisparse" index 1 (EAGLE, lookahead slots); a judge leaving
    EAGLE's drop out expects a hit a block longer than the release's (op 83), and the
    catalogue's `eagle_margin_dropped` (the lookup not looked a block past its cap before the
    drop) gives one a block shorter there. Without the hit's exact length the mutant survives
    the first 100 traces, all with EAGLE."""
    from kvfuzz.oracle.kvmanager import align_hit

    trace = hisparse.GENERATOR.generate(0, EAGLE)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    impl = "vllm.kvmanager"
    if broken == "judge":
        monkeypatch.setattr(align_hit, "eagle_full_hit", align_hit.full_attention_hit)
    else:
        impl = f"mutant.vllm.kvmanager.{broken}"
    found = divergence("kvmanager", trace, impl)
    assert found is not None and found.what.startswith("prefix hit") and found.step == 83, found
    assert "after EAGLE's drop" in found.lines[-1][1], found.report()
