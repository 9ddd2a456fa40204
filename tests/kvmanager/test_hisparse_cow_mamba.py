"""The Mamba "align" group beside HiSparse's (the "hisparse cow" profile), judged as in the "align"
mode's own checks (`fuzz/kvmanager/hisparse_cow.py`): the state the worker reads at each step
(`align_reads.py`), the prefill checkpoint block (`Trace.mamba_checkpoint`) and speculative blocks
(`Trace.mamba_speculative`), each in half the profile's traces, drawn after every other draw. The
codec takes both beside HiSparse (lookahead slots too since 2026-12-08: test_hisparse_lookahead.py);
an admission's Mamba count holds their blocks (no vLLM); on the released class's traces the read
check catches a state freed under the worker's read earlier than the kept-states rule, a chunk
that takes no checkpoint block and a step that allocates no speculative blocks are caught, and the
admission count without either is wrong where the release is clean. Skips without vLLM but the
codec's and the count's own tests."""

import dataclasses
import random

import pytest

from kvfuzz.fuzz.kvmanager import align_reads, hisparse_admission
from kvfuzz.fuzz.kvmanager.hisparse_admission import partial_and_mamba
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec, hisparse_cow
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import divergence, needs_engine

READS = 3  # seed 0's index 3 (no checkpoint): a state freed under the worker's read, op 6
CHECKPOINTED = 4  # index 4: a checkpoint block at op 1 (a chunk from 0 to 27 tokens)
SPECULATIVE = 0  # index 0: two speculative blocks from op 1
COUNTED = 68  # index 68: an admission whose count holds a checkpoint block (op 110)
SPEC_COUNTED = 9  # index 9: an admission whose count holds two speculative blocks (op 12)


def test_the_cow_layout_takes_checkpoint_and_speculative_blocks_through_the_codec():
    traces = [hisparse_cow.GENERATOR.generate(0, i) for i in range(40)]
    on = [t for t in traces if t.mamba_checkpoint and t.mamba_speculative]
    assert 10 < sum(bool(t.mamba_checkpoint) for t in traces) < 30  # half each, drawn
    assert 10 < sum(bool(t.mamba_speculative) for t in traces) < 30
    assert all(t.mamba_checkpoint in (t.hash_block_size, 1) for t in on)
    assert all(t.mamba_speculative in (0, 1, 2) for t in traces)
    # (lookahead slots as many in half of those: test_hisparse_lookahead.py)
    assert all(t.lookahead in (0, t.mamba_speculative) for t in traces)
    for trace in on[:5]:
        assert codec.from_json(to_json(trace)) == trace
    filled = hisparse_cow.FILLED.generate(0, 0)  # (not drawn there)
    assert not filled.mamba_checkpoint and not filled.mamba_speculative
    # without the layout's hash block below the block: refused, named
    data = to_json(on[0]) | {"hash_block_size": 0}
    with pytest.raises(FormatError, match="field .hisparse.: expected 0 with .*mamba_checkpoint"
                                          ", mamba_speculative"):
        codec.from_json(data)


def test_a_trace_drawn_without_a_checkpoint_is_the_trace_before_the_draw():
    """The shares' draws come after every other (the checkpoint's, then the speculative
    blocks', then, with speculative blocks, the lookahead slots'): a trace with either is, but
    for those fields, the trace its seed gives with those last draws answered "no"."""
    on = 0
    for seed in range(30):
        counting = _Counting(seed)
        drawn = hisparse_cow.build_cow(counting, 200)
        last = 3 if drawn.mamba_speculative else 2  # (no lookahead draw without them)
        plain = hisparse_cow.build_cow(
            _Counting(seed, off_at=set(range(counting.calls - last + 1, counting.calls + 1))),
            200)
        assert not plain.mamba_checkpoint and not plain.mamba_speculative
        assert plain == dataclasses.replace(drawn, mamba_checkpoint=0, mamba_speculative=0,
                                            lookahead=0)
        on += bool(drawn.mamba_checkpoint or drawn.mamba_speculative)
    assert on > 10


class _Counting(random.Random):
    """A seeded Random counting its `random()` calls, those numbered in `off_at` answered 1.0
    ("no" to a share); `getrandbits` defined here so that `choice` and `randint` draw as the
    base class does (a subclass overriding `random` alone would draw them from `random`)."""

    def __init__(self, seed, off_at=()):
        super().__init__(seed)
        self.calls, self.off_at = 0, off_at

    def random(self):
        self.calls += 1
        return 1.0 if self.calls in self.off_at else super().random()

    def getrandbits(self, k):
        return super().getrandbits(k)


def test_an_admission_counts_the_checkpoint_block_of_its_chunk():
    ref = [0] * 8
    # 9 tokens from no hit in blocks of 4, hashed per token, aligned to 1: the chunk exports
    # its state at token 8 into table position 1, a block more than the state it writes
    assert partial_and_mamba(9, 4, 0, [], ref, 1, 1) == (0, 2)
    assert partial_and_mamba(9, 4, 0, [], ref, 1, 0) == (0, 1)  # no checkpoint block
    assert partial_and_mamba(9, 4, 0, [], ref, 2, 2) == (0, 2)  # hashed per 2, aligned to 2
    # a chunk within its last block: its checkpoint position leaves no block (index < 0)
    assert partial_and_mamba(3, 4, 0, [], ref, 1, 1) == (0, 1)
    # two speculative blocks: counted past the state, and in the cap of a request new to the
    # group (its state, the checkpoint's and the two)
    assert partial_and_mamba(9, 4, 0, [], ref, 1, 0, 2) == (0, 3)
    assert partial_and_mamba(9, 4, 0, [], ref, 1, 1, 2) == (0, 4)
    # a hit of 6 inside block 1, its state free: the copy and the speculative blocks counted too
    assert partial_and_mamba(9, 4, 6, [0, 1], ref, 1, 0, 1) == (1, 4)


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)


@_ENGINE[0]
@_ENGINE[1]
def test_a_state_freed_under_the_workers_read_is_caught_at_that_step(monkeypatch):
    """The catalogue's `mamba_align_read_state_freed` (the state the worker reads freed at the
    step): the read check catches it at op 6 of index 3; the kept-states rule alone at op 14."""
    trace = hisparse_cow.GENERATOR.generate(0, READS)
    assert not trace.mamba_checkpoint
    name = "mutant.vllm.kvmanager.mamba_align_read_state_freed"
    found = divergence("kvmanager", trace, name)
    assert found is not None and found.what.startswith("mamba reads") and found.step == 6, \
        found and found.report()
    monkeypatch.setattr(align_reads.AlignReads, "read_step_problems", lambda *args: [])
    later = divergence("kvmanager", trace, name)
    assert later is not None and later.step > 6 and later.what.startswith("mamba states")


@_ENGINE[0]
@_ENGINE[1]
def test_a_chunk_taking_no_checkpoint_block_is_caught():
    trace = hisparse_cow.GENERATOR.generate(0, CHECKPOINTED)
    assert trace.mamba_checkpoint
    found = divergence("kvmanager", trace,
                       "mutant.vllm.kvmanager.mamba_align_checkpoint_not_taken")
    assert found is not None and found.what.startswith("mamba states"), found
    # (the device cache map's check, since 2026-12-07, reports the block it keyed after it)
    assert "holds no checkpoint block" in found.report(), found.report()
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None


@_ENGINE[0]
@_ENGINE[1]
def test_a_step_allocating_no_speculative_blocks_is_caught():
    trace = hisparse_cow.GENERATOR.generate(0, SPECULATIVE)
    assert trace.mamba_speculative == 2
    found = divergence("kvmanager", trace, "mutant.vllm.kvmanager.mamba_align_speculative_dropped")
    assert found is not None and found.what.startswith("mamba states"), found
    assert "2 speculative: expected" in found.lines[-1][1], found.report()
    # (the release clean there: test_hisparse_cow's copying trace, index 0)


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("index, left_out", [(COUNTED, "checkpoint"),
                                             (SPEC_COUNTED, "speculative")])
def test_the_admission_count_needs_the_checkpoint_and_speculative_blocks(monkeypatch, index,
                                                                          left_out):
    """The release is clean on indices 68 and 9; the judge counting no checkpoint block (68,
    op 110) or no speculative blocks (9, op 12) expects an admission the release refuses."""
    trace = hisparse_cow.GENERATOR.generate(0, index)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    plain = hisparse_admission.partial_and_mamba

    def counted(*args):  # (tokens, size, hit, mamba, ref, hash size, checkpoint, speculative)
        args = list(args)
        args[6 if left_out == "checkpoint" else 7] = 0
        return plain(*args)
    monkeypatch.setattr(hisparse_admission, "partial_and_mamba", counted)
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what.startswith("None vs success"), found
    assert "expected blocks" in found.lines[-1][1], found.report()
