"""EAGLE with a draft model's group flagged apart (`kvmanager/5[eagle groups]`,
`strategies/kvmanager/eagle_groups.py`): the trace field and its one-line refusals; the oracle's
rule (only the flagged group takes EAGLE's drop and caches the peek block; none flagged: every
group) on the model; with vLLM (slow), the released manager runs the profile clean to its edge
classes, and an oracle that lets every group drop is told apart from it. The mutants of the
hybrid coordinator (`eagle_drop_every_group`, `eagle_peek_every_group`) are caught in
`test_mutants.py`."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.oracle.kvmanager.model import EAGLE_APART, KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec
from kvfuzz.strategies.kvmanager import eagle_groups as profile
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import agreeing_features, with_engine

BASE = {"format": "kvfuzz-kvmanager-trace/1", "blocks": 8, "block_size": 2, "window": 4,
        "max_model_len": 64, "ops": [], "eagle": True, "eagle_groups": [1]}


with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)


def test_the_field_round_trips_and_bad_values_are_one_line_errors():
    trace = next(t for t in map(lambda i: profile.GENERATOR.generate(0, i), range(5))
                 if len(t.eagle_groups) == 1)
    assert codec.from_json(to_json(trace)) == trace
    assert codec.from_json(BASE).eagle_groups == (1,)
    assert "eagle_groups" not in to_json(codec.from_json(BASE | {"eagle_groups": []}))
    for change in ({"eagle_groups": [2]}, {"eagle_groups": [1, 0]}, {"eagle_groups": [0, 0]},
                   {"eagle_groups": "1"}, {"window": 0},
                   {"window": 0, "local_chunk": 4, "eagle": False}):
        with pytest.raises(FormatError) as error:
            codec.from_json(BASE | change)
        assert "\n" not in str(error.value) and "eagle_groups" in str(error.value)


@pytest.mark.parametrize("flagged, dropping", [((), (True, True)), ((0,), (True, False)),
                                               ((1,), (False, True)), ((0, 1), (True, True))])
def test_only_the_flagged_groups_drop(flagged, dropping):
    model = KVManagerModel(8, 2, 4, 64, eagle=True, eagle_groups=flagged)
    assert model.dropping == dropping
    assert KVManagerModel(8, 2, 4, 64, eagle=False, eagle_groups=flagged).dropping == \
        (False, False)  # use_eagle cleared (lookahead hashing): flagged, none drops


def test_a_step_caches_the_peek_block_for_the_flagged_group_alone():
    model = KVManagerModel(8, 2, 4, 64, eagle=True, eagle_groups=(1,))
    assert (model.cacheable(5, 0), model.cacheable(5, 1)) == (4, 5)
    assert EAGLE_APART[2] in model.take_marks()


@with_vllm
def test_the_released_manager_runs_the_profile_clean_to_its_edge_classes():
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", vllm, (profile.GENERATOR.generate(0, index)
                                                   for index in range(16)))
    wanted = [*EAGLE_APART, "config: EAGLE groups flagged apart",
              "EAGLE: a window hit drops its last block"]
    assert all(events[name] for name in wanted), {name: events[name] for name in wanted}


@with_vllm
def test_an_oracle_letting_every_group_drop_is_told_apart():
    """The per-group rule is load-bearing: with every group dropping (the rule before flags),
    the oracle diverges from the released manager on traces that flag one group (19 of the
    first 40, 2026-12-04); index 2 flags full attention alone."""
    vllm = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    trace = profile.GENERATOR.generate(0, 2)
    assert trace.eagle_groups == (0,)
    original = KVManagerModel.drops
    try:
        KVManagerModel.drops = lambda self, group: self.eagle
        assert KVMANAGER.check(trace, vllm).status != AGREE
    finally:
        KVManagerModel.drops = original
    assert KVMANAGER.check(trace, vllm).status == AGREE
