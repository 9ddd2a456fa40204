"""The finish's `remove_skipped_blocks` beside a Mamba "align" group (the "mamba connector"
profile's `remove_skipped`; the judge's side: `fuzz/kvmanager/align_external.py`'s
`remove_skipped`). The generator puts one before each finish, as vLLM 0.33.0's
`_connector_finished` calls it, without changing the ops it draws (no vLLM); the released
class agrees on the profile's first traces, the states it frees at a finish counted; the
mutant whose call counts one token too many processed (`mamba_finish_frees_last_state`: the
state of the last token freed where it ends a block) is caught by this call alone: its corpus
case (`corpus/kvmanager-31171a5baff38b9e.json`) passes with the `remove_skipped` taken out,
and so do the profile's first ops before their first finish."""

import json
import pathlib
from dataclasses import replace

from kvfuzz.strategies.kvmanager import codec, mamba_connector
from kvfuzz.strategies.kvmanager.trace import Finish, RemoveSkipped
from tests.helpers import divergence, with_engine

_ENGINE = with_engine("vllm")  # (slow: it imports vLLM)
CASE = pathlib.Path(__file__).parents[2] / "corpus" / "kvmanager-31171a5baff38b9e.json"
MUTANT = "mutant.vllm.kvmanager.mamba_finish_frees_last_state"


def test_a_remove_skipped_before_each_finish_and_the_other_ops_as_drawn(monkeypatch):
    traces = [mamba_connector.GENERATOR.generate(0, index) for index in range(20)]
    finishes = 0
    for trace in traces:
        for before, op in zip(trace.ops, trace.ops[1:]):
            if isinstance(op, Finish):
                assert before == RemoveSkipped(op.rid), (before, op)
                finishes += 1
        assert not isinstance(trace.ops[0], Finish)
        assert sum(isinstance(op, RemoveSkipped) for op in trace.ops) == \
            sum(isinstance(op, Finish) for op in trace.ops)
    assert finishes > 50
    # without the post-pass: the same ops, none taken out or drawn differently
    monkeypatch.setattr(mamba_connector, "_finished", lambda ops: ops)
    for index, trace in enumerate(traces):
        plain = mamba_connector.GENERATOR.generate(0, index)
        assert tuple(op for op in trace.ops if not isinstance(op, RemoveSkipped)) == plain.ops


def _case():
    return codec.from_json(json.loads(CASE.read_text()))


@_ENGINE
def test_the_released_class_agrees_and_frees_states_at_a_finish():
    from kvfuzz.fuzz.kvmanager import align_external
    from kvfuzz.fuzz.targets import TARGETS

    assert divergence("kvmanager", _case(), "vllm.kvmanager") is None
    target = TARGETS["kvmanager"]
    released, judged, freed = target.catalogue.resolve("vllm.kvmanager"), 0, 0
    for index in range(3):
        outcome = target.check(mamba_connector.GENERATOR.generate(0, index), released)
        assert outcome.divergence is None, outcome.divergence
        judged += outcome.features[align_external.SKIPPED]
        freed += outcome.features[align_external.SKIPPED_FREED]
    assert judged > 10 and freed > 0, (judged, freed)


@_ENGINE
def test_only_the_finishs_remove_skipped_catches_the_mutant():
    trace = _case()
    found = divergence("kvmanager", trace, MUTANT)
    assert found is not None and found.what.startswith("remove_skipped"), found
    without = replace(trace, ops=tuple(op for op in trace.ops
                                       if not isinstance(op, RemoveSkipped)))
    assert divergence("kvmanager", without, MUTANT) is None
