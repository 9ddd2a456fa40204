"""HiSparse's worker reporting write-backs late, out of order and in parts (the "hisparse lag"
profile, `strategies/kvmanager/hisparse_lag.py`; the judge's side:
`fuzz/kvmanager/hisparse_lag.py`). The schedule is the trace's (a codec round trip keeps it; it
is drawn per transfer id, the same in every process). A coordinator that takes an enqueue, or
one rank's completion, for the whole write-back, that publishes a page once enqueued, that lets
a pinned host block go before its write-back completes, that drops a finished request's hold,
or that frees the held pages unpublished is caught, each at the index pinned here; the first
four pass unseen on the "hisparse" profile's traces, where every write-back is reported whole
one op later. The released class runs the profile clean (`test_every_profile.py`). Skips
without vLLM but the strategy's tests."""

import functools

import pytest

from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import codec, hisparse, hisparse_lag
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import divergence, needs_engine
from tests.kvmanager.hisparse_doubles import broken_manager


def test_a_lag_trace_keeps_its_schedule_through_the_codec():
    trace = hisparse_lag.GENERATOR.generate(0, 0)
    assert trace.hisparse and len(trace.hisparse_lag) == 3
    assert codec.from_json(to_json(trace)) == trace
    assert to_json(trace)["hisparse_lag"] == list(trace.hisparse_lag)
    assert "hisparse_lag" not in to_json(hisparse.GENERATOR.generate(0, 0))  # as before


def test_the_schedule_is_late_split_and_out_of_order_and_on_time_without_a_lag():
    lag = (4, 3, 12345)
    delays = [hisparse_lag.report_delays(lag, tid) for tid in range(200)]
    assert delays == [hisparse_lag.report_delays(lag, tid) for tid in range(200)]
    assert all(len(done) == 3 and min(done) >= enqueue for enqueue, done in delays)
    assert any(enqueue for enqueue, _ in delays)  # enqueued late
    assert any(max(done) > enqueue for enqueue, done in delays)  # enqueued, not yet completed
    assert any(len(set(done)) > 1 for _, done in delays)  # ranks completing apart
    ends = [max(done) for _, done in delays]
    assert any(ends[tid] > ends[tid + 1] + 1 for tid in range(199))  # out of order
    assert hisparse_lag.report_delays((), 7) == (0, (0,))


@pytest.mark.parametrize("lag, match", [([0, 1, 5], "expected"), ([1, 5, 5], "expected"),
                                        ([2, 2], "expected")])
def test_a_malformed_lag_is_refused_in_one_line(lag, match):
    data = to_json(hisparse_lag.GENERATOR.generate(0, 0)) | {"hisparse_lag": lag}
    with pytest.raises(FormatError, match=f"field .hisparse_lag.: {match}"):
        codec.from_json(data)


def test_a_lag_without_hisparse_is_refused():
    data = to_json(hisparse_lag.GENERATOR.generate(0, 0)) | {"hisparse": 0}
    with pytest.raises(FormatError, match="field .hisparse_lag.: expected .. without"):
        codec.from_json(data)


@functools.cache
def doubles() -> dict:
    """Subclasses of the released class whose HiSparse coordinator (built in the constructor,
    as the connector's `bind_kv_cache_manager` would: it is memoised on the managers) breaks
    one thing the scheduler relies on. Built on first use, never at collection."""
    Broken = broken_manager()  # (its coordinator handed to each double's `break_`)

    class DurableOnEnqueue(Broken):  # an enqueued write-back counted as completed
        @staticmethod
        def break_(coordinator):
            update = coordinator.update_spills
            coordinator.update_spills = lambda enqueued, completed: update(
                enqueued, {**completed, **enqueued})

    class PublishesOnEnqueue(Broken):  # a page published once enqueued, still pinned
        @staticmethod
        def break_(coordinator):
            update = coordinator.update_spills

            def update_spills(enqueued, completed):
                update(enqueued, completed)
                for tid in enqueued:
                    pending = coordinator.pending_spills.get(tid)
                    if pending is None or pending.restore:
                        continue
                    request_id, page = pending.page
                    state = pending.request_state
                    if coordinator.request_states.get(request_id) is state:
                        state.valid_pages.add(page)
                        while state.ready_prefix_pages in state.valid_pages:
                            state.ready_prefix_pages += 1
                        coordinator._publish_host_blocks_if_ready(request_id)
            coordinator.update_spills = update_spills

    class OneRankIsEnough(Broken):  # a write-back done once the first rank completes it
        @staticmethod
        def break_(coordinator):
            update = coordinator.update_spills
            coordinator.update_spills = lambda enqueued, completed: update(
                {tid: 1 for tid in enqueued}, completed)

    class PinReleasedOnEnqueue(Broken):  # the host block's pin dropped once enqueued
        @staticmethod
        def break_(coordinator):
            update, complete = coordinator.update_spills, coordinator._complete_host_writes
            pool = coordinator.get_host_block_pool()

            def update_spills(enqueued, completed):
                for tid in enqueued:
                    pending = coordinator.pending_spills.get(tid)
                    if pending is not None and not pending.expected_worker_completions:
                        pool.free_blocks([pending.host_block])
                update(enqueued, completed)

            def complete_host_writes():  # taken again just before the release frees it
                for pending in coordinator.pending_spills.values():
                    if pending.enqueue_applied:
                        pool.touch([pending.host_block])
                complete()
            coordinator.update_spills = update_spills
            coordinator._complete_host_writes = complete_host_writes

    class FinishDropsHold(Broken):  # a finished request's pages in flight never held
        @staticmethod
        def break_(coordinator):
            free = coordinator.free

            def dropping(request_id):
                state = coordinator.request_states.get(request_id)
                if state is not None:
                    state.publication = None  # as a preemption: nothing to publish
                free(request_id)
            coordinator.free = dropping

    class HeldPagesNeverPublished(Broken):  # held, then freed with no hash published
        @staticmethod
        def break_(coordinator):
            publish, pool = coordinator._publish_detached_blocks, \
                coordinator.get_host_block_pool()

            def unpublished(state):
                pool.cache_full_blocks = lambda *args, **kwargs: None
                try:
                    publish(state)
                finally:
                    del pool.cache_full_blocks  # the pool's own method again
            coordinator._publish_detached_blocks = unpublished

    return {cls.__name__: cls for cls in (DurableOnEnqueue, PublishesOnEnqueue, OneRankIsEnough,
                                          PinReleasedOnEnqueue, FinishDropsHold,
                                          HeldPagesNeverPublished)}


NAMES = ("DurableOnEnqueue", "PublishesOnEnqueue", "OneRankIsEnough", "PinReleasedOnEnqueue",
         "FinishDropsHold", "HeldPagesNeverPublished")


def __getattr__(name):  # a double by import path: tests.kvmanager.test_hisparse_lag:...
    if name in NAMES:
        return doubles()[name]
    raise AttributeError(name)


_ENGINE = needs_engine("vllm")  # (slow: it imports vLLM)

# (double, the first index of the "hisparse lag" stream of seed 0 that kills it, the check, words
# of its message that say which)
KILLS = [("DurableOnEnqueue", 0, "host pool", "in flight (transfer, block)"),
         ("PublishesOnEnqueue", 0, "published early", "no write-back done"),
         ("OneRankIsEnough", 0, "host pool", "in flight (transfer, block)"),
         ("PinReleasedOnEnqueue", 0, "host pool", "in flight (transfer, block)"),
         ("FinishDropsHold", 0, "host pool", "finished requests' holds"),
         ("HeldPagesNeverPublished", 0, "published late", "finished with write-backs in flight")]


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken, index, label, words", KILLS, ids=[k[0] for k in KILLS])
def test_a_broken_coordinator_is_caught_at_its_pinned_index(broken, index, label, words):
    stream, broken = hisparse_lag.GENERATOR, f"{__name__}:{broken}"
    assert all(divergence("kvmanager", stream.generate(0, i), broken) is None
               for i in range(index))
    found = divergence("kvmanager", stream.generate(0, index), broken)
    assert found is not None and found.what.startswith(label), found and found.report()
    assert words in found.report(), found.report()


@_ENGINE[0]
@_ENGINE[1]
@pytest.mark.parametrize("broken", NAMES[:4])
def test_without_the_lag_the_first_four_pass_unseen(broken):
    """What the profile adds: where the worker reports every write-back whole one op later (the
    "hisparse" profile), an enqueue is a completion and one rank is all, so the first four
    doubles agree with the release on the traces that catch them with the lag."""
    for index in range(10):
        assert divergence("kvmanager", hisparse.GENERATOR.generate(0, index),
                          f"{__name__}:{broken}") is None, index
