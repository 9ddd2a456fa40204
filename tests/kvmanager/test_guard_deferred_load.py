"""A deferred free of a request whose KV load is in flight, under the kvmanager guard: vLLM's
scheduler pops the blocks of a request aborted during its load (`pop_blocks_for_free`, when a
step that wrote them may be in flight: `defer_block_free`) and frees them on the pool later;
the guard maps it to `finish` with `defer` and `release`, checked; a deferred pop of a request
whose load is in flight and which has not finished (the scheduler frees a failed load at once)
is refused. A manager that caches the load's blocks as it pops them raises with a file that
replays. Skips without vLLM."""

import functools

import pytest

import kvfuzz
from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.target import AGREE, DIVERGE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import Arrive, Finish, Release
from tests import guarding
from tests.helpers import double, needs_engine
from tests.kvmanager.test_guard import impl_of, settings
from tests.kvmanager.test_guard_connector import connector_models, doubles
from tests.kvmanager.test_guard_deferred import deferred_trace

pytestmark = needs_engine("vllm")


@functools.cache
def caches_deferred_loads():
    """The released class, but a request popped during its load has what was loading cached
    first (as if the load had finished), not handed back uncached."""
    base = doubles()["CachesAbortedLoads"]

    class CachesDeferredLoads(base):
        def pop_blocks_for_free(self, request):
            loaded = vars(self).get("loading", {}).pop(request.request_id, 0)
            if loaded and request.is_finished():
                impl_of(None).load().cache_blocks(self, request, loaded)
            return super().pop_blocks_for_free(request)
    return CachesDeferredLoads


def __getattr__(name):  # the double by import path (a replay loads it)
    if name == "CachesDeferredLoads":
        return caches_deferred_loads()
    raise AttributeError(name)


DOUBLE = double("kvmanager", f"{__name__}:CachesDeferredLoads")


def modelled(trace):
    """A "deferred frees" trace as far as the guard models it (`connector_models`), and whose
    synchronous loads compute a token (the scheduler's do): None otherwise."""
    if any(isinstance(op, Connect) and not op.load and op.chunk == 0 for op in trace.ops):
        return None
    return connector_models(trace)


def loading(tmp_path, impl=None):
    """A manager of `impl` (default: the released class) guarded, request 1 (10 tokens) admitted
    with an asynchronous load of 8 external tokens: (the manager, its guard, the request)."""
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver

    impl = impl or impl_of(None)
    driver = KVManagerDriver(impl.load(), 12, 4, 0, 64)
    guarded = kvfuzz.guard(driver.manager, "kvmanager", impl=impl, corpus=tmp_path)
    driver.arrive(1, list(range(1, 11)))
    request = driver.requests[1]
    blocks, hit, _, _ = guarded.get_computed_blocks_for_connector(request)
    guarded.allocate_slots(request, 0, hit, blocks, num_external_computed_tokens=8,
                           delay_cache_blocks=True, skip_zeroing_group_ids=(0,))
    return driver.manager, guarded, request


def test_a_deferred_free_during_a_load_is_finish_with_defer_then_release(tmp_path):
    manager, guarded, request = loading(tmp_path)
    free = manager.block_pool.get_num_free_blocks()
    with pytest.raises(kvfuzz.GuardUnsupported, match="during its KV load, not finished"):
        guarded.pop_blocks_for_free(request)  # a failed load: the scheduler frees it at once
    request.status = type(request.status).FINISHED_ABORTED  # aborted during its load
    popped = guarded.pop_blocks_for_free(request)
    assert len(popped) == 2 and manager.block_pool.get_num_free_blocks() == free  # held
    guarded.block_pool.free_blocks(reversed(popped))
    assert manager.block_pool.get_num_free_blocks() == free + 2
    assert not manager.block_pool.cached_block_hash_to_block  # the load never finished
    session = guarded.kvfuzz_session
    assert session.divergence is None
    assert [op for op in session.ops if not isinstance(op, Arrive)] == [
        Connect(0, 0, 8, True), Finish(0, True), Release(0)]


def test_a_manager_caching_the_load_it_pops_raises_with_a_file_that_replays(tmp_path):
    _, guarded, request = loading(tmp_path, DOUBLE)
    request.status = type(request.status).FINISHED_ABORTED
    with pytest.raises(kvfuzz.Mismatch) as raised:
        guarded.pop_blocks_for_free(request)
    found = raised.value.divergence
    assert isinstance(found.input.ops[found.step], Finish), found.report()
    _, saved = corpus.load(found.saved_path)
    assert KVMANAGER.check(saved, DOUBLE).status == DIVERGE
    assert KVMANAGER.check(saved, impl_of(None)).status == AGREE


@pytest.mark.slow
def test_kvfuzzs_deferred_traces_with_frees_during_a_load_run_guarded_clean(tmp_path):
    """The "deferred frees" profile pops requests whose load is in flight (an abort during a
    load); made through the guard, the released class runs clean and the double is caught
    where the batch judge catches it."""
    during = 0
    for index in range(120):  # 30 of them modelled, 14 pops during a load
        trace = modelled(deferred_trace(index, None))
        if trace is not None:
            session = guarding.guarded_run(KVMANAGER, trace, impl_of(None),
                                           tmp_path / "released", settings=settings)
            assert session.divergence is None, index
            during += session.lock.events["free deferred during its KV load"]
    assert during, "no deferred free during a load"
    assert not (tmp_path / "released").exists()
    caught = guarding.assert_guard_verdicts_are_the_batch_judges(
        KVMANAGER, impl_of(None), [DOUBLE], tmp_path, traces=120, settings=settings,
        modelled=modelled, generate=deferred_trace)
    assert caught == {DOUBLE.name}
