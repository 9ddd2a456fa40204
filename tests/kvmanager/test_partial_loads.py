"""A KV connector that loads some KV-cache groups only (`get_loaded_kv_cache_group_ids`, passed
to `allocate_slots` as `skip_zeroing_group_ids`): where blocks are zeroed, the external blocks
of the groups the load does not write are recorded for zeroing (`Connect.written`). Its JSON
field, the oracle's records, and the guard's mapping of such an admission; the mutant that
skips zeroing for every group is caught. The vLLM parts skip without vLLM."""

import pytest

import kvfuzz
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.connector_ops import EVERY_GROUP, Connect
from kvfuzz.strategies.kvmanager.trace import Arrive, Trace, to_json
from tests.helpers import with_engine



with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)


OPS = (Arrive(1, tuple(range(1, 11))), Connect(1, 0, 8, load=True, written=1))


def test_written_round_trips_and_a_file_without_it_loads_every_group():
    trace = Trace(16, 4, 8, 64, OPS, zeroing=True)
    data = to_json(trace)
    assert data["ops"][1]["written"] == 1 and from_json(data, "t") == trace
    data["ops"][1].pop("written")
    assert from_json(data, "t").ops[1].written == EVERY_GROUP
    assert "written" not in to_json(Trace(16, 4, 8, 64, (Connect(1, 0, 8, load=True),)))["ops"][0]
    data["ops"][1]["written"] = 256
    with pytest.raises(FormatError, match=r"ops\[1\]\.written"):
        from_json(data, "t")


def test_the_oracle_zeroes_the_external_blocks_of_the_groups_not_written():
    from kvfuzz.oracle.kvmanager.model import KVManagerModel
    from kvfuzz.strategies.kvmanager.hashing import chain_from

    tokens = list(range(1, 11))
    for zero, expected in ((True, [1, 2, 3, 4, 5, 6]), (frozenset({1}), [4, 5, 6]),
                           (frozenset(), [])):
        model = KVManagerModel(16, 4, 8, 64, zeroing=True)
        model.allocate_slots(1, chain_from(None, tokens, 4), 10, 0, 0, 0, [[], []],
                             tokens=tokens, external=10, delay=True, zero_external=zero)
        assert model.take_new_block_ids() == expected, zero


def loading_some_groups(tmp_path, name=None):
    """A manager of `name` (None: released) over full attention and an 8-token window in two
    precisions, guarded; request 1 admitted with an asynchronous load writing group 0 only."""
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver
    from tests.kvmanager.test_guard import impl_of

    impl = impl_of(name)
    driver = KVManagerDriver(impl.load(), 16, 4, 8, 64, zeroing=True)
    guarded = kvfuzz.guard(driver.manager, "kvmanager", impl=impl.name, corpus=tmp_path)
    driver.arrive(1, list(range(1, 11)))
    request = driver.requests[1]
    blocks, hit, _, _ = guarded.get_computed_blocks_for_connector(request)
    guarded.allocate_slots(request, 0, hit, blocks, num_external_computed_tokens=10,
                           delay_cache_blocks=True, skip_zeroing_group_ids=(0,))
    return driver.manager, guarded


@with_vllm
def test_the_guard_maps_a_load_of_some_groups_and_checks_its_records(tmp_path):
    manager, guarded = loading_some_groups(tmp_path)
    session = guarded.kvfuzz_session
    assert session.divergence is None and session.ops[-1] == Connect(0, 0, 10, True, 0, 1)
    window = manager.get_block_ids("1")[1]
    assert guarded.take_new_block_ids() == [b for b in window if b]  # the window's zeroed


@with_vllm
def test_a_partial_load_that_zeroes_no_group_raises_under_the_guard(tmp_path):
    with pytest.raises(kvfuzz.Mismatch, match=r"zeroing +new_block_ids: expected \[\d"):
        loading_some_groups(tmp_path, "partial_load_skips_all_zeroing")


def partial_session(seed: int, name: str | None, corpus_dir, check: bool = True):
    """Session `seed` of vLLM's scheduler over full attention and a window in two precisions
    with the fake connector over both groups (`ZEROING_CONNECTOR`), guarded (or recorded)."""
    from tests.kvmanager.test_guard import scheduler_session

    return scheduler_session(seed, name, corpus_dir, check, workload="ZEROING_CONNECTOR")


@with_vllm
def test_vllms_scheduler_loading_some_groups_runs_guarded_and_replays(tmp_path):
    partial = 0
    for seed in range(3):
        session = partial_session(seed, None, tmp_path)
        guarded = session.manager.kvfuzz_session
        assert session.finished == session.requests == 10 and guarded.divergence is None
        partial += sum(isinstance(op, Connect) and op.written != EVERY_GROUP
                       for op in guarded.ops)
        recorded = partial_session(seed, None, tmp_path, check=False).manager.kvfuzz_session
        assert recorded.trace() == guarded.trace()
        assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert partial, "no load of some groups only"
    assert not list(tmp_path.glob("*.json"))


@with_vllm
def test_the_partial_load_mutant_raises_in_vllms_scheduler_with_a_file_that_replays(tmp_path):
    from tests import guarding

    name = "partial_load_skips_all_zeroing"
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: partial_session(seed, name, tmp_path), f"mutant.vllm.kvmanager.{name}",
        "vllm.kvmanager", seeds=3)
