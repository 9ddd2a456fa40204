"""KV connectors on the manager's oracle (hand-made cases, answers from vLLM 0.33.0's released
source: `oracle/kvmanager/connector.py`), and the judge's connector properties firing on
hand-made broken states (`fuzz/kvmanager/connector.py`): external blocks that are not the
request's own, a load's blocks cached before it is reported, zeroing records that differ. No
vLLM needed."""

from types import SimpleNamespace

import pytest

from kvfuzz.fuzz.kvmanager.connector import LOADING, ConnectorOps
from kvfuzz.oracle.kvmanager.model import KVManagerModel, NothingToAllocate
from kvfuzz.strategies.kvmanager.hashing import chain

TOKENS = list(range(1, 11))  # 10 tokens: two full blocks of 4 and two tokens


def connect(model, rid=1, tokens=TOKENS, new=0, external=10, load=True, reserve=0):
    hashes = chain(tokens, model.bs)
    blocks, hit, _ = model.get_computed_blocks(hashes, len(tokens))
    return model.allocate_slots(rid, hashes, len(tokens), 0, new, hit, blocks, tokens=tokens,
                                external=external, delay=load, reserve=reserve,
                                zero_external=not load, lookahead=0 if load else None)


def test_an_asynchronous_load_gets_blocks_of_its_own_and_caches_nothing_until_reported():
    model = KVManagerModel(blocks=10, block_size=4, window=0, max_model_len=100)
    # the external tokens' blocks are not in the result (no slots past the computed tokens)
    assert connect(model) == [[]]
    assert model.block_ids(1) == [[1, 2, 3]] and model.pool.map == {}
    model.cache_blocks(1, chain(TOKENS, 4), 10, TOKENS)  # the load reported
    assert sorted(block for blocks in model.pool.map.values() for block in blocks) == [1, 2]


def test_a_synchronous_load_caches_with_its_step_and_returns_only_the_new_slots():
    model = KVManagerModel(blocks=10, block_size=4, window=0, max_model_len=100)
    assert connect(model, new=3, external=6, load=False) == [[3]]
    assert model.block_ids(1) == [[1, 2, 3]] and len(model.pool.map) == 2


def test_external_tokens_alone_are_not_a_step_of_nothing():
    model = KVManagerModel(blocks=10, block_size=4, window=0, max_model_len=100)
    connect(model, external=5)
    with pytest.raises(NothingToAllocate):
        connect(model, rid=2, external=0)


def test_reserved_blocks_refuse_what_would_fit_without_them():
    model = KVManagerModel(blocks=4, block_size=4, window=0, max_model_len=100)
    assert connect(model, reserve=1) is None  # 3 blocks needed, 3 free, 1 reserved
    assert model.block_ids(1) == [[]] and model.pool.num_free() == 3
    assert connect(model, reserve=0) == [[]]


def test_zeroing_records_new_slots_the_load_does_not_write_and_a_failed_prefix():
    model = KVManagerModel(blocks=20, block_size=4, window=8, max_model_len=100, zeroing=True)
    connect(model)  # asynchronous: its external blocks are written by the load, not zeroed
    assert model.take_new_block_ids() == []
    model.record_blocks_for_zeroing(1, 4)  # a failed load, 4 tokens valid
    full, window = model.block_ids(1)
    assert model.take_new_block_ids() == full[1:] + window[1:]
    connect(model, rid=2, tokens=[9] * 10, new=4, external=5, load=False)
    assert model.take_new_block_ids() == [b for group in model.block_ids(2) for b in group if b]
    assert model.take_new_block_ids() == []  # taken once


def test_a_window_skips_external_tokens_it_leaves_behind():
    model = KVManagerModel(blocks=20, block_size=4, window=3, max_model_len=100)
    connect(model)
    full, window = model.block_ids(1)
    # 10 computed tokens: the window (3) keeps tokens 8 and 9 alone, in block 2
    assert len(full) == 3 and window[:2] == [0, 0] and window[2]


class _Judge(ConnectorOps):
    """The connector properties over hand-made reads (what the implementation answered)."""

    def __init__(self, tables, keys=(), zeroed=(), expected_zeroed=()):
        self.model = SimpleNamespace(sizes=(4,), skipped_tokens=lambda group, computed: 0,
                                     take_new_block_ids=lambda: list(expected_zeroed))
        self.trace = SimpleNamespace(zeroing=bool(zeroed or expected_zeroed))
        self.requests = {rid: SimpleNamespace(status="running", held=[0]) for rid in tables}
        self.answers = {"block_ids": tables.__getitem__, "keys": lambda: list(keys),
                        "take_new_block_ids": lambda: list(zeroed)}

    def read(self, method, *args):
        return self.answers[method](*args)

    def count(self, name):
        pass


def test_external_blocks_must_be_the_requests_own():
    assert _Judge({1: [[3, 4, 5]], 2: [[6]]})._own_blocks(1, [1], 10) == []
    for tables in ({1: [[3, 0, 5]], 2: [[6]]},    # the null block
                   {1: [[3, 4, 6]], 2: [[6]]},    # another request's block
                   {1: [[3, 3, 5]], 2: [[6]]}):   # the block its hit brought
        problems = _Judge(tables)._own_blocks(1, [1], 10)
        assert [kind for kind, _ in problems] == ["external blocks"], tables


def test_a_load_in_flight_caches_nothing_past_its_hit():
    judge = _Judge({1: [[3, 4, 5]]}, keys=[None, None, None, (7, 0), None, None])
    judge.requests[1].status, judge.requests[1].held = LOADING, [1]
    assert judge.connector_problems() == []  # block 3 is the adopted hit, cached before
    judge.answers["keys"] = lambda: [None, None, None, (7, 0), (8, 0), None]
    assert [kind for kind, _ in judge.connector_problems()] == ["cached before the load"]


def test_zeroing_records_are_compared():
    assert _Judge({}, zeroed=[4, 5], expected_zeroed=[4, 5]).connector_problems() == []
    problems = _Judge({}, zeroed=[4], expected_zeroed=[4, 5]).connector_problems()
    assert [kind for kind, _ in problems] == ["zeroing"]


def test_a_release_without_the_connector_calls_runs_no_connector_trace():
    """An earlier release's class (no `get_computed_blocks_for_connector`, `reserved_blocks`
    or `record_blocks_for_zeroing`) declares so; a trace with a connector op is then outside
    its contract, one without is not."""
    from kvfuzz.strategies.kvmanager.connector_ops import Connect
    from kvfuzz.strategies.kvmanager.released import NO_CONNECTOR, broken
    from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace

    plain = Trace(10, 4, 0, 100, (Arrive(1, (1, 2, 3)), Schedule(1, 9)))
    connected = Trace(10, 4, 0, 100, (Arrive(1, (1, 2, 3)), Connect(1, 9, 2, True)))
    assert broken(plain, (NO_CONNECTOR,)) == []
    assert broken(connected, ()) == []
    assert broken(connected, (NO_CONNECTOR,)) == [
        f"a trace with a setting the class does not take: {NO_CONNECTOR}"]


# Groups of different block sizes (the "connector sizes" profile): full attention in blocks of
# 2 beside a sliding window in blocks of 4, hashed per 2 tokens, the scheduler block 4.
def _sizes_model(**settings) -> KVManagerModel:
    return KVManagerModel(blocks=20, block_size=2, window=100, max_model_len=100,
                          window_block_size=4, **settings)


def test_each_group_counts_external_blocks_in_its_own_block_size():
    model = _sizes_model(zeroing=True)
    hashes = chain(TOKENS, 2)
    blocks, hit, _ = model.get_computed_blocks(hashes, len(TOKENS))
    # 6 external tokens: they end inside the window's second block of 4, on full attention's
    # third block of 2; a load writing full attention only: the window's blocks zeroed
    assert model.allocate_slots(1, hashes, 10, 0, 0, hit, blocks, tokens=TOKENS, external=6,
                                delay=True, zero_external=frozenset({1}),
                                lookahead=0) == [[], []]
    full, window = model.block_ids(1)
    assert (len(full), len(window)) == (3, 2) and model.pool.map == {}
    assert [model.external_cover(group, 6, 6) for group in (0, 1)] == [3, 2]
    assert model.take_new_block_ids() == window


def test_a_load_cached_when_reported_stops_at_the_scheduler_block():
    model = _sizes_model()
    hashes = chain(TOKENS, 2)
    model.allocate_slots(1, hashes, 10, 0, 0, 0, [[], []], tokens=TOKENS, external=6,
                         delay=True, zero_external=True, lookahead=0)
    model.cache_blocks(1, hashes, 6, TOKENS, 10)  # the load reported: 6 computed tokens
    # cached up to the scheduler block (4 tokens): two blocks of 2, one of 4
    cached = sorted(block for found in model.pool.map.values() for block in found)
    full, window = model.block_ids(1)
    assert cached == sorted(full[:2] + window[:1])


def test_external_blocks_must_cover_the_tokens_in_each_groups_block_size():
    judge = _Judge({1: [[3, 4, 5], [6, 7]]})
    judge.model = _sizes_model()
    assert judge._covered(1, [[3, 4, 5], [6, 7]], 6, 6, load=True) == []
    assert judge._covered(1, [[3, 4, 5, 8], [6, 7, 9]], 6, 6, load=False) == []  # + a step
    for tables in ([[3, 4, 5], [6, 7, 8]],   # the window's counted to the scheduler block
                   [[3, 4], [6, 7]],         # full attention's in the window's size
                   [[3, 4, 5, 8], [6, 7]]):  # a block past the load's tokens
        problems = judge._covered(1, tables, 6, 6, load=True)
        assert [kind for kind, _ in problems] == ["external blocks"], tables
    # a group that skips every external token (a chunked-local group at a chunk's end): its
    # table is left as the hit made it, and not checked
    judge.model = KVManagerModel(blocks=20, block_size=2, window=0, max_model_len=100,
                                 local_chunk=4)
    assert judge.model.external_cover(1, 8, 4) is None
    assert judge._covered(1, [[3, 4, 5, 6], [0, 0]], 8, 4, load=True) == []
