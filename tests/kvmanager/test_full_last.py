"""Full attention's KV-cache group ordered last (`Trace.full_last`, the "full last" profile), as
vLLM 0.33.0 groups a model whose first layer is Mamba or cross attention: the oracle takes and
frees blocks in the manager's group order while naming group 0 full attention, and the field's
round trip and one-line refusals; the profile drawn in the mix on a share of its own (alone
only until 2026-12-06). Pure Python (the release and the mutants it kills:
`test_manager_mutants.py`), but for the test that each map of the reduced mode's group ids is
needed (`fuzz/kvmanager/align_order.py`), which runs the release (slow tier)."""

from dataclasses import replace

import pytest

from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import streams
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.hashing import chain
from kvfuzz.strategies.kvmanager.trace import Arrive, Trace, to_json
from tests.helpers import with_engine
from tests.kvmanager.test_oracle_hybrid import admit


def _admitted(full_last: bool):
    # Blocks of 4, 7 encoder tokens: 3 decoder blocks and 2 cross-attention ones
    model = KVManagerModel(blocks=12, block_size=4, window=0, max_model_len=100,
                           caching=False, encoder_tokens=7, full_last=full_last)
    got, _ = admit(model, 1, list(range(1, 11)))
    return model, got


def test_the_manager_walks_the_second_group_first_and_the_answers_stay_by_group():
    # the cross-attention group (walked first) takes the first free blocks; answers still name
    # full attention's group first
    model, got = _admitted(full_last=True)
    assert got == [[3, 4, 5], [1, 2]] and model.block_ids(1) == [[3, 4, 5], [1, 2]]
    assert _admitted(full_last=False)[1] == [[1, 2, 3], [4, 5]]  # the usual walk


def test_a_deferred_free_pops_the_blocks_in_the_managers_walk():
    # a decode into a new block gives full attention block 6; the tables popped group after
    # group in the manager's walk: cross attention's [1, 2] first, then full attention's
    tokens = list(range(1, 11)) + [9, 9, 9]
    for full_last, expected in ((True, [1, 2, 3, 4, 5, 6]), (False, [1, 2, 3, 6, 4, 5])):
        model, _ = _admitted(full_last)
        model.allocate_slots(1, chain(tokens, 4), 13, 10, 3, 0, None, tokens=tokens)
        assert model.pop_blocks_for_free(1) == expected, full_last


def _trace(**settings) -> dict:
    return to_json(Trace(8, 2, 0, 64, (), caching=False, mamba_mode="none",
                         full_last=True)) | settings


def test_the_field_round_trips_and_its_refusals_name_it():
    trace = from_json(_trace())
    assert trace.full_last and "full attention's group last" in trace.describe()
    assert not from_json(_trace(full_last=False)).full_last
    for bad in (dict(mamba_mode=""), dict(mamba_mode="", window=4),
                dict(mamba_mode="", local_chunk=4), dict(eagle_groups=[0]), dict(dcp=2)):
        with pytest.raises(FormatError, match="full_last|eagle_groups|dcp"):
            from_json(_trace(**bad))


def test_mamba_align_may_come_first_with_caching_on():
    trace = from_json(_trace(mamba_mode="align", caching=True, mamba_speculative=1))
    assert trace.full_last and trace.caching and trace.mamba_mode == "align"
    assert to_json(trace)["full_last"] is True


def test_the_profile_has_a_share_of_the_mix_and_each_trace_orders_full_attention_last():
    # alone only until 2026-12-06; since, a share of its own (index 282 of seed 0 the first)
    assert [s for s, _, _ in streams.STREAMS if s.name == "kvmanager/5[full last]"] == \
        [streams.ALONE["full last"]]
    assert streams.GENERATOR.generate(0, 282).note == "profile full last"
    made = [streams.ALONE["full last"].generate(0, index) for index in range(20)]
    assert all(t.full_last and t.note == "profile full last" for t in made)
    # the three kinds: Mamba "none"/"all" and cross attention caching off, "align" on
    kinds = {("cross" if t.encoder_tokens else t.mamba_mode == "align", t.caching) for t in made}
    assert kinds == {("cross", False), (False, False), (True, True)}, kinds
    assert all(from_json(to_json(t)) == t for t in made)


def test_the_align_kind_shares_prompts_past_256_tokens_that_end_on_a_state():
    # index 4 is the first "align" trace: a prompt ending past 256 on the hash grid, then a
    # longer one sharing it (both groups can hit it: test_manager_mutants.py's 378)
    trace = streams.ALONE["full last"].generate(0, 4)
    assert trace.mamba_mode == "align" and trace.caching
    prompts = [op.tokens for op in trace.ops if isinstance(op, Arrive)]
    assert any(256 < len(a) < len(b) and b[:len(a)] == a and len(a) % trace.hash_size == 0
               for a in prompts for b in prompts)


# Each map of `align_order` forgotten (the pool's ids read as the trace's), the release diverges
# on the first trace that reads it: the profile's first "align" trace (index 4) offers a state
# at op 1; the first finished partial tail is "mamba align"'s index 48, ordered full last here
# (the profile's own first 300 traces hand none off).
FORGOTTEN = [(("keys", "cache"), "full last", 4, "names block 1, which is not cached under"),
             (("offloads",), "full last", 4, "names group 0: only the Mamba group (1)"),
             (("tail",), "mamba align", 48, "names group 0: only the Mamba group (1)")]


@with_engine("vllm")
@pytest.mark.parametrize("maps, profile, index, shows", FORGOTTEN)
def test_a_check_that_reads_the_pools_group_ids_unmapped_fails_the_release(
        monkeypatch, maps, profile, index, shows):
    from kvfuzz.fuzz.engine.target import AGREE
    from kvfuzz.fuzz.kvmanager import align_order
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    release = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    alone = KVMANAGER.alone(profile)
    trace = replace(alone.generator.generate(0, index), full_last=True)
    assert trace.mamba_mode == "align" and alone.check(trace, release).status == AGREE
    for name in maps:
        monkeypatch.setattr(align_order, name, lambda ids, read: read)
    outcome = alone.check(trace, release)
    assert outcome.status != AGREE and shows in outcome.divergence.report(), \
        outcome.divergence and outcome.divergence.report()
