"""The kvmanager guard over KV-cache zeroing (fuzz/kvmanager/guard_zeroing.py): where vLLM's
cache mixes precisions its manager records every new attention block for zeroing and the
scheduler takes the records every step (`take_new_block_ids`); the guard compares them with the
oracle's after every op without emptying the scheduler's list, and compares each take. vLLM's
scheduler over full attention and a window in two precisions runs guarded clean; a mutant that
leaves a new block out, or keeps the records after the take, raises with a file that replays.
Skips without vLLM."""

from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from tests import guarding
from tests.helpers import needs_engine
from tests.kvmanager.test_guard import impl_of, scheduler_session, settings
from tests.kvmanager.test_guard_connector import connector_models, connector_trace

pytestmark = needs_engine("vllm")
ZEROING_MUTANTS = ("new_block_not_zeroed", "zeroing_records_kept")


def guarded_zeroing(tmp_path, name: str | None = None):
    """A manager of `name` (None: the released class) over full attention and an 8-token window
    in two precisions, guarded; request 1 (10 tokens) arrived and looked up."""
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver

    driver = KVManagerDriver(impl_of(name).load(), 16, 4, 8, 64, zeroing=True)
    guarded = kvfuzz.guard(driver.manager, "kvmanager", impl=impl_of(name).name,
                           corpus=tmp_path)
    driver.arrive(1, list(range(10)))
    request = driver.requests[1]
    return guarded, request, guarded.get_computed_blocks(request)


def test_the_records_are_checked_and_left_for_the_scheduler_to_take(tmp_path):
    guarded, request, (blocks, hit, _) = guarded_zeroing(tmp_path)
    assert guarded.kvfuzz_session.header.zeroing  # read from needs_kv_cache_zeroing
    new = guarded.allocate_slots(request, 10, hit, blocks)
    # the lock step compared the records after the op and left them where they were
    assert guarded.take_new_block_ids() == [b for group in new.get_block_ids() for b in group]
    assert guarded.take_new_block_ids() == []
    # record_blocks_for_zeroing is the scheduler's call after a failed load's cache_blocks only
    with pytest.raises(kvfuzz.GuardUnsupported, match="where the trace owes None"):
        guarded.record_blocks_for_zeroing(request.request_id, 0)
    assert guarded.kvfuzz_session.divergence is None


def test_a_new_block_left_out_of_the_records_raises_at_its_allocation(tmp_path):
    guarded, request, (blocks, hit, _) = guarded_zeroing(tmp_path, "new_block_not_zeroed")
    with pytest.raises(kvfuzz.Mismatch, match=r"zeroing +new_block_ids: expected \[1, 2, 3, "):
        guarded.allocate_slots(request, 10, hit, blocks)
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_a_take_that_drops_a_record_raises_at_the_take(tmp_path):
    """The records the manager holds are right, but its take hands the scheduler one short:
    caught by the guard's comparison of the take (no op of its own: reported at the last)."""
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver

    released = impl_of(None).load()

    class DropsATakenRecord(released):
        def take_new_block_ids(self):
            return super().take_new_block_ids()[1:]

    driver = KVManagerDriver(DropsATakenRecord, 16, 4, 8, 64, zeroing=True)
    guarded = kvfuzz.guard(driver.manager, "kvmanager", corpus=tmp_path)
    driver.arrive(1, list(range(10)))
    request = driver.requests[1]
    blocks, hit, _ = guarded.get_computed_blocks(request)
    guarded.allocate_slots(request, 10, hit, blocks)
    with pytest.raises(kvfuzz.Mismatch, match=r"zeroing +take_new_block_ids: expected \[1, "):
        guarded.take_new_block_ids()


def zeroing_session(seed: int, name: str | None, corpus_dir, check: bool = True):
    """A session over full attention and a window in two precisions (`ZEROING`)."""
    return scheduler_session(seed, name, corpus_dir, check, workload="ZEROING")


@pytest.mark.slow
def test_vllms_scheduler_zeroing_runs_guarded_with_no_divergence(tmp_path):
    preempted = compared = 0
    for seed in range(3):
        session = zeroing_session(seed, None, tmp_path)
        guarded = session.manager.kvfuzz_session
        assert session.finished == session.requests == 10, session
        assert guarded.divergence is None and guarded.header.zeroing
        preempted += session.preemptions
        compared += guarded.lock.events["zeroing records compared"]
        recorded = zeroing_session(seed, None, tmp_path, check=False).manager.kvfuzz_session
        assert recorded.trace() == guarded.trace()
        assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert preempted and compared > 300, (preempted, compared)
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ZEROING_MUTANTS)
def test_a_zeroing_mutant_raises_in_vllms_scheduler_with_a_file_that_replays(name, tmp_path):
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: zeroing_session(seed, name, tmp_path), f"mutant.vllm.kvmanager.{name}",
        "vllm.kvmanager", seeds=3)


# -- kvfuzz's own connector traces with zeroing, made through the guard -----------------------
def zeroing_connector_models(trace):
    """A "connector" profile trace that zeroes, as far as the guard models it (the rules of
    test_guard_connector.connector_models), and whose synchronous loads compute a token (the
    scheduler's do): None otherwise."""
    from kvfuzz.strategies.kvmanager.connector_ops import Connect

    modelled = connector_models(replace(trace, zeroing=False))
    if not trace.zeroing or modelled is None or any(
            isinstance(op, Connect) and not op.load and op.chunk == 0 for op in trace.ops):
        return None
    return replace(modelled, zeroing=True)


@pytest.mark.slow
def test_on_kvfuzzs_zeroing_connector_traces_the_guards_verdict_is_the_batch_judges(tmp_path):
    """The batch driver's calls through the guard: its drain after every op is the
    scheduler's take, and a failed load's record_blocks_for_zeroing comes right after its
    cache_blocks, owed by the `loaded` op. The released class runs clean, the four zeroing
    mutants are caught where the batch judge catches them."""
    names = ("loaded_blocks_zeroed", "zeroing_skips_first_block", *ZEROING_MUTANTS)
    caught = guarding.assert_guard_verdicts_are_the_batch_judges(
        KVMANAGER, impl_of(None), [impl_of(name) for name in names], tmp_path, traces=60,
        settings=settings, modelled=zeroing_connector_models, generate=connector_trace)
    assert {name.rsplit(".", 1)[1] for name in caught} == set(names), caught
    recorded_again = 0
    for index in range(60):
        trace = zeroing_connector_models(connector_trace(index, None))
        if trace is not None:
            session = guarding.guarded_run(KVMANAGER, trace, impl_of(None),
                                           tmp_path / "released", settings=settings)
            assert session.divergence is None, index
            recorded_again += session.lock.events["blocks recorded for zeroing again"]
    assert recorded_again, "no failed load's blocks recorded again"
    assert not (tmp_path / "released").exists()  # nothing diverged: nothing saved
