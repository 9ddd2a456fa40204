"""A KV connector beside a Mamba group in mode "none" or "all", prefix caching off (the "mamba
plain connector" profile, `strategies/kvmanager/mamba_plain.py`; judged by `connector.py` with
`fuzz/kvmanager/mamba_plain.py`'s check). Its traces are the scheduler's shape, the oracle's
worked example and the check's broken tables need no vLLM; the released class runs the traces
clean (`test_every_profile.py`) and the catalogue mutant `mamba_plain_external_states_counted`
is caught on them (`test_mutants.py`; by hand, 2026-12-08: on 9 of the profile's first 20, none
of the "mamba" profile's first 40, where without external tokens it is the released count)."""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.kvmanager import mamba_plain as check
from kvfuzz.oracle.kvmanager.model import KVManagerModel
from kvfuzz.strategies.kvmanager import mamba_plain, streams
from kvfuzz.strategies.kvmanager.connector_ops import EVERY_GROUP, Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import Finish, RemoveSkipped


def test_the_profiles_traces_are_a_connector_beside_a_plain_mamba_group():
    made = Counter()
    for index in range(40):
        trace = mamba_plain.GENERATOR.generate(0, index)
        assert trace.note == "profile mamba plain connector"
        assert trace.mamba_mode in ("none", "all") and not trace.caching and trace.zeroing
        # (multi-token prediction's share since 2026-12-08: k speculative blocks, k slots)
        assert not trace.window and trace.lookahead == trace.mamba_speculative <= 3
        made[trace.mamba_mode] += 1
        made["speculative Mamba blocks"] += bool(trace.mamba_speculative)
        made["asynchronous scheduling"] += trace.async_scheduling
        for before, op in zip((None, *trace.ops), trace.ops):
            if isinstance(op, Connect):
                made["asynchronous load" if op.load else "synchronous load"] += 1
                made["some groups"] += op.written != EVERY_GROUP
            elif isinstance(op, Loaded):
                # two groups: a failure is the request's whole (`failed_recving`)
                assert op.valid in (-1, 0), (index, op)
                made["load done" if op.valid < 0 else "load failed"] += 1
            elif isinstance(op, Finish):  # the scheduler's remove_skipped_blocks first
                assert isinstance(before, RemoveSkipped) and before.rid == op.rid, \
                    (index, before, op)
    assert all(made[kind] for kind in ("none", "all", "asynchronous load", "synchronous load",
                                       "some groups", "load done", "load failed",
                                       "asynchronous scheduling",
                                       "speculative Mamba blocks")), made


def test_it_is_made_alone_only():
    assert streams.ALONE["mamba plain connector"] is mamba_plain.GENERATOR
    assert "mamba plain connector" in streams.ALONE_ONLY
    assert "mamba plain connector" in streams.profiles()


def _model(mode: str = "none") -> KVManagerModel:
    return KVManagerModel(20, 4, 0, 1024, caching=False, mamba_mode=mode, zeroing=True)


def test_the_oracle_gives_a_load_the_last_states_block_alone_and_zeroes_full_attention():
    """The worked example read on vLLM 0.33.0 (docs/upstream-vllm.md): an asynchronous load of
    12 external tokens in blocks of 4: full attention three blocks of its own, the Mamba group
    `[0, 0, b]`; only full attention's blocks recorded for zeroing (a Mamba group's never), and
    of those none the load writes."""
    for mode in ("none", "all"):
        model = _model(mode)
        got = model.allocate_slots(1, [], 14, 0, 0, 0, [[], []], external=12, delay=True,
                                   zero_external=frozenset({1}), lookahead=0)
        assert got == [[], []] and model.predicted == 4
        full, mamba = model.tables[0][1], model.tables[1][1]
        assert len(full) == 3 and all(full) and mamba[:2] == [0, 0] and mamba[2]
        assert model.take_new_block_ids() == []  # (the load writes full attention's)
        # a synchronous load of 5 tokens with a step of 3 more: full attention's external and
        # new blocks recorded, the Mamba group's state blocks not
        model.allocate_slots(2, [], 9, 0, 3, 0, [[], []], external=5)
        assert model.tables[1][2][:1] == [0] and all(model.tables[1][2][1:])
        assert model.take_new_block_ids() == model.tables[0][2]


def test_the_check_sees_a_mamba_table_that_breaks_the_rule():
    """`mamba_plain.admitted` on the implementation's tables: the released shape passes; a
    state left below the last one, the last one null, or the table short of it fail."""
    trace = mamba_plain.GENERATOR.generate(0, 0)
    size, counted = trace.block_size, Counter()
    computed = 2 * size + 1  # the last state in block 2
    good = [[1, 2, 3], [0, 0, 4]]
    assert check.admitted(lambda name: counted.update([name]), trace, 1, good, computed,
                          True) == []
    assert counted[check.LOAD] and counted[check.NULLED]
    assert counted[check.INSIDE] == (computed % size != 0)
    for broken in ([[1, 2, 3], [5, 0, 4]], [[1, 2, 3], [0, 0, 0]], [[1, 2, 3], [0, 0]]):
        problems = check.admitted(lambda name: None, trace, 1, broken, computed, False)
        assert problems and problems[0][0] == "external blocks", broken
