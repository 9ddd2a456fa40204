"""KV-connector calls under the kvmanager live guard (`fuzz/kvmanager/guard_connector.py`): vLLM's
v1 scheduler with a deterministic fake connector (`fuzz/kvmanager/fake_connector.py`) and with
the CPU offloading connector runs guarded, its connector admissions, asynchronous loads and
resumptions checked in lock step; a mutant of each connector check raises at its first bad call
with a file that replays. And the judge's rule that a request resumed after its KV load passes
the scheduler's full_sequence_must_fit. Skips without vLLM."""

import functools
import inspect
import random
from collections import Counter
from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.fuzz.engine.target import AGREE, DIVERGE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule, Trace
from tests import guarding
from tests.helpers import double, needs_engine

pytestmark = needs_engine("vllm")


def impl_of(name: str | None):
    return KVMANAGER.catalogue.resolve("vllm.kvmanager" if name is None else
                                       f"mutant.vllm.kvmanager.{name}")


def test_a_request_resumed_after_its_load_must_fit_whole():
    """The scheduler passes full_sequence_must_fit to the first allocation after a KV load
    (no lookup then) as to every admission: r1's 20 tokens need 3 blocks more than its loaded
    8 hold, 2 are free, so its 4-token chunk is refused though it would fit alone."""
    ops = (Arrive(1, tuple(range(1, 21))), Connect(1, 0, 8, load=True),
           Arrive(2, tuple(range(100, 112))), Schedule(2, 12), Loaded(1), Schedule(1, 4))
    trace = Trace(8, 4, 0, 100, ops, full_sequence_must_fit=True)
    assert KVMANAGER.check(trace, impl_of(None)).status == AGREE
    found = KVMANAGER.check(trace, impl_of("whole_request_unchecked"))
    assert found.status == DIVERGE and found.divergence.step == 5, found


def test_a_failed_synchronous_load_rewinds_the_request_and_keeps_its_blocks_cached():
    """`loaded` with a failure right after a synchronous load's admission: r1 loaded 12
    external tokens and computed 2 (14, its 4 blocks cached to 3 whole); failed from token 6,
    it is cut to 4 and computes again into the same blocks, still cached. A manager evicting
    them diverges at that allocation."""
    ops = (Arrive(1, tuple(range(1, 21))), Connect(1, 2, 12), Loaded(1, 6), Schedule(1, 4),
           Schedule(1, 10), Arrive(2, tuple(range(1, 21))), Schedule(2, 8))
    trace = Trace(16, 4, 0, 100, ops)
    assert KVMANAGER.check(trace, impl_of(None)).status == AGREE
    broken = double("kvmanager", f"{__name__}:EvictsRewoundBlocks")
    found = KVMANAGER.check(trace, broken)
    assert found.status == DIVERGE and found.divergence.step == 3, found


# -- vLLM's scheduler with the fake connector, guarded ----------------------------------------
def fake_session(seed: int, name: str | None, corpus_dir, check: bool = True):
    """Session `seed` of vLLM's scheduler with the seeded fake connector over a tight pool (24
    blocks: loads wait on blocks reserved for the prefills in flight), its manager an instance
    of `name` (None: the released class), guarded (or recorded)."""
    from tests.kvmanager.test_guard import scheduler_session

    return scheduler_session(seed, name, corpus_dir, check, workload="FAKE_CONNECTOR")


@pytest.mark.slow
def test_vllms_scheduler_with_a_fake_connector_runs_guarded_with_no_divergence(tmp_path):
    """Connector admissions (through get_computed_blocks_for_connector), asynchronous loads,
    their reports and resumptions all mapped and checked; the record is the guard's trace,
    seeded (the same session twice records the same), and replays clean."""
    kinds, resumed = Counter(), 0
    for seed in range(5):
        session = fake_session(seed, None, tmp_path)
        guarded = session.manager.kvfuzz_session
        assert session.finished == session.requests == 10, session
        assert guarded.divergence is None
        kinds.update(type(op).__name__ for op in guarded.ops)
        kinds.update("load" for op in guarded.ops if isinstance(op, Connect) and op.load)
        kinds.update("reserve" for op in guarded.ops if isinstance(op, Connect) and op.reserve)
        recorded = fake_session(seed, None, tmp_path, check=False).manager.kvfuzz_session
        assert recorded.trace() == guarded.trace()
        assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
    assert all(kinds[kind] for kind in ("Connect", "Loaded", "load", "reserve", "Preempt")), kinds
    assert not list(tmp_path.glob("*.json"))


# One mutant per check the connector path has: the connector's lookup (hit_diverged), external
# blocks of the request's own (a null block is not one: the pool's invariants), nothing cached
# before the load is reported, the blocks reserved for prefills in flight, and the whole request
# checked at a connector admission or a resumption.
CONNECTOR_MUTANTS = ("connector_hit_diverged", "external_on_null_block", "delayed_load_cached",
                     "reserved_blocks_ignored", "whole_request_unchecked")


@pytest.mark.slow
@pytest.mark.parametrize("name", CONNECTOR_MUTANTS)
def test_a_connector_mutant_raises_under_the_fake_connector_with_a_file_that_replays(name,
                                                                                     tmp_path):
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: fake_session(seed, name, tmp_path), f"mutant.vllm.kvmanager.{name}",
        "vllm.kvmanager", seeds=5)


# -- kvfuzz's own connector traces, made through the guard ------------------------------------
def connector_models(trace):
    """A "connector" profile trace as far as the guard models it: full attention, or beside a
    sliding window; no zeroing, KV events or stats; every request reading the cache; no draft
    slots (the guard is given none here: a padded trace's placeholder rows stay, as an n-gram
    drafter's); None otherwise. (A request finished during its load is an abort, modelled.)"""
    from kvfuzz.strategies.kvmanager.trace import Arrive, Schedule

    if trace.local_chunk or trace.zeroing or trace.events or trace.stats:
        return None
    ops = [replace(op, no_cache_read=False) if isinstance(op, Arrive) else op
           for op in trace.ops if not (isinstance(op, Schedule) and op.chunk == 0)]
    return replace(trace, ops=tuple(ops), lookahead=0)


def connector_trace(index: int, impl):
    from kvfuzz.strategies.kvmanager import connector

    return connector.build(random.Random(f"guard connector {index}"), 120)


@pytest.mark.slow
def test_on_kvfuzzs_connector_traces_the_guards_verdict_is_the_batch_judges(tmp_path):
    caught = guarding.assert_guard_verdicts_are_the_batch_judges(
        KVMANAGER, impl_of(None), [impl_of(name) for name in CONNECTOR_MUTANTS], tmp_path,
        traces=60, settings=lambda kwargs: {"max_in_flight_tokens": kwargs.get(
            "max_in_flight_tokens")}, modelled=connector_models, generate=connector_trace)
    assert {name.rsplit(".", 1)[1] for name in caught} == set(CONNECTOR_MUTANTS), caught


def test_what_the_guard_does_not_model_of_a_connector_is_refused_before_the_call(tmp_path):
    """A load naming a group the manager lacks, a cache_blocks that is neither a load done nor
    a failed one's valid prefix (a whole block): refused, never made. An
    abort during a load (the free of a finished request whose load is in flight) is a
    `finish`, checked."""
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver
    from kvfuzz.strategies.kvmanager.trace import Finish

    driver = KVManagerDriver(impl_of(None).load(), 12, 4, 0, 64)
    manager = driver.manager
    guarded = kvfuzz.guard(manager, "kvmanager", corpus=tmp_path)
    for rid in (1, 2):
        driver.arrive(rid, list(range(rid, rid + 10)))
    request, aborted = driver.requests[1], driver.requests[2]
    RequestStatus = type(request.status)
    blocks, hit, _, _ = guarded.get_computed_blocks_for_connector(request)
    free = manager.block_pool.get_num_free_blocks()
    with pytest.raises(kvfuzz.GuardUnsupported, match="name groups the manager has"):
        guarded.allocate_slots(request, 0, hit, blocks, num_external_computed_tokens=8,
                               delay_cache_blocks=True, skip_zeroing_group_ids=(3,))
    assert manager.block_pool.get_num_free_blocks() == free  # never made
    for each in (request, aborted):
        blocks, hit, _, _ = guarded.get_computed_blocks_for_connector(each)
        guarded.allocate_slots(each, 0, hit, blocks, num_external_computed_tokens=8,
                               delay_cache_blocks=True, skip_zeroing_group_ids=(0,))
    request.num_computed_tokens = 5  # not on a block: no failed load's valid prefix
    with pytest.raises(kvfuzz.GuardUnsupported, match="nor a failed one's valid prefix"):
        guarded.cache_blocks(request, 5)
    assert manager.block_pool.get_num_free_blocks() == free - 4 and not manager.block_pool.\
        cached_block_hash_to_block
    request.num_computed_tokens = 4
    guarded.cache_blocks(request, 4)  # failed past its first block: checked, and agrees
    aborted.status = RequestStatus.FINISHED_ABORTED
    guarded.free(aborted)  # aborted during its load: its blocks go back uncached
    assert guarded.kvfuzz_session.divergence is None
    assert [op for op in guarded.kvfuzz_session.ops if not isinstance(op, Arrive)] == [
        Connect(0, 0, 8, True), Connect(1, 0, 8, True), Loaded(0, 4), Finish(1)]
    assert manager.block_pool.get_num_free_blocks() == free - 2


@functools.cache
def doubles() -> dict:
    """A subclass of the released class breaking the failed-load path (built on first use)."""
    KVCacheManager = impl_of(None).load()
    signature = inspect.signature(KVCacheManager.allocate_slots)

    class CachesFailedLoads(KVCacheManager):
        """A failed load's blocks cached whole: cache_blocks after a load caches what was
        loading, not the valid prefix the scheduler asks for."""

        @functools.wraps(KVCacheManager.allocate_slots)  # its signature, as the guard reads it
        def allocate_slots(self, request, *args, **kwargs):
            got = super().allocate_slots(request, *args, **kwargs)
            given = signature.bind(self, request, *args, **kwargs)
            given.apply_defaults()
            given = given.arguments
            if got is not None and given["delay_cache_blocks"]:
                vars(self).setdefault("loading", {})[request.request_id] = \
                    given["num_new_computed_tokens"] + given["num_external_computed_tokens"]
            return got

        def cache_blocks(self, request, num_computed_tokens):
            loaded = vars(self).get("loading", {}).pop(request.request_id, 0)
            super().cache_blocks(request, max(num_computed_tokens, loaded))

    class CachesAbortedLoads(CachesFailedLoads):
        """A request aborted during its load has what was loading cached as it is freed (as
        if the load had finished), not returned uncached."""

        def cache_blocks(self, request, num_computed_tokens):
            vars(self).get("loading", {}).pop(request.request_id, 0)
            KVCacheManager.cache_blocks(self, request, num_computed_tokens)

        def free(self, request):
            loaded = vars(self).get("loading", {}).pop(request.request_id, 0)
            if loaded and request.is_finished():
                KVCacheManager.cache_blocks(self, request, loaded)
            super().free(request)

    class EvictsRewoundBlocks(KVCacheManager):
        """A running request whose computed tokens went back (a failed synchronous load) has
        its cached blocks past them evicted, as the "fail" policy would: under "recompute"
        vLLM keeps them cached (they are computed again)."""

        @functools.wraps(KVCacheManager.allocate_slots)
        def allocate_slots(self, request, *args, **kwargs):
            group = self.coordinator.single_type_managers[0]
            cached = group.num_cached_block.get(request.request_id, 0)
            start = -(-request.num_computed_tokens // group.block_size)
            if cached > start and not request.is_finished():
                self.evict_blocks(set(self.get_block_ids(request.request_id)[0][start:cached]))
            return super().allocate_slots(request, *args, **kwargs)
    return {"CachesFailedLoads": CachesFailedLoads, "CachesAbortedLoads": CachesAbortedLoads,
            "EvictsRewoundBlocks": EvictsRewoundBlocks}


def __getattr__(name):  # a double by import path: tests.kvmanager.test_guard_connector:...
    if name in ("CachesFailedLoads", "CachesAbortedLoads", "EvictsRewoundBlocks"):
        return doubles()[name]
    raise AttributeError(name)


@pytest.mark.slow
def test_a_failed_loads_blocks_cached_whole_raise_under_the_fake_connector(tmp_path):
    """The fake connector fails loads (whole, or at a block: the scheduler keeps the prefix
    before it); a manager that caches the whole load is caught where it caches."""
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import FAKE_CONNECTOR, run_session

    kinds = Counter()
    for seed in range(3):
        session = fake_session(seed, None, tmp_path)
        kinds.update("loaded, prefix valid" if op.valid > 0 else "loaded, none valid"
                     for op in session.manager.kvfuzz_session.ops
                     if isinstance(op, Loaded) and op.valid >= 0)
    assert kinds["loaded, prefix valid"] and kinds["loaded, none valid"], kinds
    found = first_mismatch(lambda seed, wrap, manager_class: run_session(
        seed, wrap, workload=FAKE_CONNECTOR, manager_class=manager_class),
        "CachesFailedLoads", tmp_path)
    assert isinstance(found.input.ops[found.step], Loaded), found.report()


# The fake connector's sessions with aborts: each step, each load in flight is aborted at 3 in
# 10.


def guarded_and_recorded(make_session, tmp_path, seeds: int = 3, aborts: bool = False) -> list:
    """Each seed's session guarded (no divergence, every request finished) and recorded (the
    same trace, which replays clean on the release): the guarded sessions."""
    sessions = []
    for seed in range(seeds):
        session = make_session(seed, lambda manager, **settings: kvfuzz.guard(
            manager, "kvmanager", corpus=tmp_path, **settings))
        guarded = session.manager.kvfuzz_session
        assert guarded.divergence is None and session.finished == session.requests
        if aborts:  # every abort of the fake worker is a finish of a loading request
            assert load_aborts(guarded.ops) == session.aborted
        recorded = make_session(seed, lambda manager, **settings: kvfuzz.record(
            manager, "kvmanager", **settings)).manager.kvfuzz_session
        assert recorded.trace() == guarded.trace()
        assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.kvmanager").ok
        sessions.append(guarded)
    return sessions


def first_mismatch(make_session, name: str, tmp_path, seeds: int = 5):
    """The first divergence of the test double `name` guarded in sessions of `make_session`."""
    broken = double("kvmanager", f"{__name__}:{name}")
    for seed in range(seeds):
        try:
            make_session(seed, lambda manager, **settings: kvfuzz.guard(
                manager, "kvmanager", impl=broken, corpus=tmp_path, **settings), broken.load())
        except kvfuzz.Mismatch as raised:
            found = raised.divergence
            assert kvfuzz.replay(found.saved_path, broken).divergences[0].signature == \
                found.signature
            assert kvfuzz.replay(found.saved_path, "vllm.kvmanager").ok
            return found
    raise AssertionError(f"{name}: no divergence in {seeds} sessions")


def aborting_session(seed: int, wrap, manager_class=None):
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import FAKE_CONNECTOR, run_session

    return run_session(seed, wrap, workload=replace(FAKE_CONNECTOR, abort_loads=0.3),
                       manager_class=manager_class)


def load_aborts(ops) -> int:
    """How many requests of a guard's ops finished while their load was in flight (a refused
    admission is admitted again: its last `connect` counts)."""
    from kvfuzz.strategies.kvmanager.trace import Finish

    loading, aborts = set(), 0
    for op in ops:
        if isinstance(op, Connect):
            (loading.add if op.load else loading.discard)(op.rid)
        elif isinstance(op, Loaded):
            loading.discard(op.rid)
        elif isinstance(op, Finish) and op.rid in loading:
            aborts += 1
    return aborts


@pytest.mark.slow
def test_aborts_during_a_load_run_guarded_and_a_manager_caching_them_raises(tmp_path):
    """The fake worker aborts requests whose loads are in flight (the scheduler frees them when
    the load is reported): each free is a `finish` of a loading request, checked; the record
    is the guard's trace and replays. A manager that caches an aborted load's blocks is caught
    at that finish, with a file that replays."""
    guarded = guarded_and_recorded(aborting_session, tmp_path, aborts=True)
    assert sum(load_aborts(g.ops) for g in guarded), "no load aborted in 3 sessions"
    found = first_mismatch(aborting_session, "CachesAbortedLoads", tmp_path)
    assert load_aborts(found.input.ops[:found.step + 1]) > load_aborts(
        found.input.ops[:found.step]), found.report()


def sync_failing_session(seed: int, wrap, manager_class=None):
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import FAKE_CONNECTOR, run_session

    return run_session(seed, wrap, workload=replace(FAKE_CONNECTOR, sync_load_failures=True),
                       manager_class=manager_class)


@pytest.mark.slow
def test_failed_synchronous_loads_run_guarded_and_a_manager_evicting_them_raises(tmp_path):
    """The fake connector fails synchronous loads at a block (reported in their step): the
    scheduler rewinds the running request's computed tokens with no call, the guard records
    it as a `loaded` failure before the request's next allocation, checked; the record is the
    guard's trace and replays. A manager that evicts the rewound blocks is caught there."""
    rewinds = sum(isinstance(op, Loaded) and isinstance(before, Connect) and not before.load
                  and op.valid >= 0 for guarded in guarded_and_recorded(sync_failing_session,
                                                                       tmp_path)
                  for before, op in zip(guarded.ops, guarded.ops[1:]))
    assert rewinds, "no synchronous load failed right after its admission in 3 sessions"
    found = first_mismatch(sync_failing_session, "EvictsRewoundBlocks", tmp_path)
    assert any(isinstance(op, Loaded) and op.valid >= 0 for op in found.input.ops[:found.step])


def test_the_fake_connectors_answers_are_seeded_and_leave_a_sync_load_a_token():
    from kvfuzz.fuzz.kvmanager.fake_connector import matched_tokens

    draws = [[matched_tokens(random.Random(seed), 40, computed, 16)
              for computed in range(0, 41, 4)] for seed in range(50)]
    assert draws == [[matched_tokens(random.Random(seed), 40, computed, 16)
                      for computed in range(0, 41, 4)] for seed in range(50)]
    answers = [(external, load, computed) for row in draws
               for (external, load), computed in zip(row, range(0, 41, 4))]
    assert all(external == 0 and not load or 0 < external <= 40 - computed - (not load)
               for external, load, computed in answers)
    assert {(external > 0, load) for external, load, _ in answers} == {
        (False, False), (True, False), (True, True)}
    assert any(load and external == 40 - computed for external, load, computed in answers)
