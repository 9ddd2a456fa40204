"""The trace's `cut` under vLLM's asynchronous scheduler (`AsyncScheduler`): a failed KV block a
running request holds with no synchronous load of its own there, reported with a step's output
while the request's next step may be in flight. vLLM (`_update_requests_with_invalid_blocks`,
`update_from_output`) sets `num_computed_tokens`, which counts that step, to the failed block's
start or back by the failed step's tokens, keeps the step in flight counted, and skips the
request's output of the failed step (its placeholder left unresolved where it sampled). The
lock step (`fuzz/kvmanager/cut.py`, `skip_output`), the guard (`guard_async._async_cut`), the
"connector cuts" profile's asynchronous traces. The vLLM parts skip without vLLM."""

from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.fuzz.kvmanager import cut
from kvfuzz.strategies.kvmanager import connector_cuts
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.connector_ops import Cut, Loaded
from kvfuzz.strategies.kvmanager.trace import Processed, to_json
from tests.helpers import with_engine

with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)

# sessions of `replace(ASYNC_CONNECTOR, sync_load_failures=True)` whose failed block another
# request holds through a prefix hit (refused by name before 2026-12-06): the cuts there (each
# set back by the failed step's tokens), how many beneath a step in flight, how many leaving
# the skipped step's placeholder
SHARED = {5: ([Cut(3, 49)], 1, 1), 62: ([Cut(1, 135), Cut(2, 65)], 1, 2),
          75: ([Cut(2, 133), Cut(4, 123)], 2, 1)}


def test_the_profile_cuts_requests_under_the_asynchronous_scheduler_in_a_share_of_its_traces():
    traces = [connector_cuts.GENERATOR.generate(0, index) for index in range(60)]
    late = [t for t in traces if t.async_scheduling]
    assert 10 <= len(late) <= 30 and all(not t.window for t in late)
    ops = [op for t in late for op in t.ops]
    cuts = [i for i, op in enumerate(ops) if isinstance(op, Cut)]
    assert len(cuts) >= 5 and any(ops[i].to % 4 for i in cuts)
    # each after a failed synchronous load, now and then after the request's `processed`
    assert any(isinstance(ops[i - 1], Processed) for i in cuts)
    assert all(any(isinstance(op, Loaded) for op in ops[max(0, i - 6):i]) for i in cuts)
    assert all(from_json(to_json(t)) == t for t in late)


def test_the_synchronous_traces_keep_their_ops():
    """The share is drawn after every other draw: a synchronous trace is the one the profile
    made before (`_synchronous` from the same stream)."""
    import random

    for index in range(40):
        rng = random.Random(index)
        built = connector_cuts.build(random.Random(index), 200)
        if not built.async_scheduling:
            assert built == connector_cuts._synchronous(rng, 200)


class _Request:
    def __init__(self, tokens, computed, in_flight, ghost=0):
        self.tokens, self.computed, self.in_flight, self.ghost = list(range(tokens)), \
            computed, in_flight, ghost
        self.owed = 0


@pytest.mark.parametrize("tokens, computed, in_flight, ghost, left, owed", [
    (10, 11, 1, 0, 1, 1),    # decoding: the failed step sampled, the placeholder's step too
    (10, 8, 0, 0, 0, 0),     # a prefill chunk, its output processed: nothing sampled
    (10, 10, 0, 0, 1, 0),    # the failed step ended the prompt: its placeholder left
    (10, 10, 4, 0, 0, 1),    # not in the failed step (or a chunk): the step in flight samples
    (10, 6, 4, 0, 0, 0),     # two chunks, neither samples
    (10, 12, 1, 1, 1, 1),    # a ghost already: the positions past the tokens move on by it
    (10, 10, 1, 1, 0, 0),    # with a ghost, the last step processed sampled nothing
])
def test_a_skipped_output_leaves_the_placeholders_vllm_leaves(tokens, computed, in_flight,
                                                               ghost, left, owed):
    request = _Request(tokens, computed, in_flight, ghost)
    assert cut.skip_output(request) == left
    assert (request.ghost, request.owed) == (ghost + left, owed)


def async_failing(seed: int, wrap, manager_class=None):
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import ASYNC_CONNECTOR, run_session

    return run_session(seed, wrap, workload=replace(ASYNC_CONNECTOR, sync_load_failures=True),
                       manager_class=manager_class)


def guarded(seed: int, tmp_path):
    return async_failing(seed, lambda m, **s: kvfuzz.guard(m, "kvmanager", corpus=tmp_path,
                                                            **s))


@with_vllm
@pytest.mark.slow
@pytest.mark.parametrize("seed", sorted(SHARED))
def test_a_request_cut_by_a_shared_failed_block_runs_guarded_and_replays(seed, tmp_path):
    run = guarded(seed, tmp_path)
    session = run.manager.kvfuzz_session
    assert session.divergence is None and run.finished == run.requests
    cuts, beneath, left = SHARED[seed]
    assert [op for op in session.ops if isinstance(op, Cut)] == cuts
    assert session.lock.events[cut.CUT_IN_FLIGHT] == beneath
    assert session.lock.events[cut.CUT_GHOST] == left
    recorded = async_failing(seed, lambda m, **s: kvfuzz.record(m, "kvmanager", **s))
    assert recorded.manager.kvfuzz_session.trace() == session.trace()
    assert kvfuzz.replay(recorded.manager.kvfuzz_session.save(tmp_path / "r"),
                         "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


def forgets_the_step_in_flight(original):
    """A broken lock step: the cut applied as the synchronous scheduler's, nothing of the
    request in flight after it."""
    def broken(self, op):
        request = self.requests.get(op.rid)
        yield from original(self, op)
        if request is not None:
            request.in_flight = 0
    broken._handles = (Cut,)
    return broken


@with_vllm
@pytest.mark.slow
@pytest.mark.parametrize("broken, seed", [("forgets the step in flight", 62),
                                          ("leaves no placeholder", 5)])
def test_a_lock_step_mishandling_the_step_in_flight_at_a_cut_is_caught(broken, seed, tmp_path,
                                                                       monkeypatch):
    """A lock step that forgets the step in flight beneath a cut (session 62: r2's next
    allocation then passes other tokens in flight than the engine's; in session 5 r3's next
    call is that step's output, which makes the two the same), or resolves the skipped step's
    placeholder (no `ghost`, no `owed`: session 5), is never a pass."""
    from kvfuzz.fuzz.kvmanager.cut import CutOps

    if broken == "forgets the step in flight":
        monkeypatch.setattr(CutOps, "cut", forgets_the_step_in_flight(CutOps.cut))
    else:
        monkeypatch.setattr(cut, "skip_output", lambda request: 0)
    with pytest.raises((kvfuzz.Mismatch, kvfuzz.GuardUnsupported)):
        guarded(seed, tmp_path)


@with_vllm
def test_an_asynchronous_rewind_outside_the_schedulers_rule_is_refused(tmp_path):
    """r0 (12 tokens, blocks of 4) admitted with 6, then 5 more while the 6 are in flight; the
    first step's output reports a failed block: set back by its 6 (to 5) or to a block's start
    (4), a `cut` beneath the step in flight; to 3, neither: refused before the call."""
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver
    from tests.kvmanager.test_guard import impl_of

    for to, made in ((3, None), (5, Cut(0, 5)), (4, Cut(0, 4))):
        driver = KVManagerDriver(impl_of(None).load(), 16, 4, 0, 64)
        manager = kvfuzz.guard(driver.manager, "kvmanager", corpus=tmp_path,
                               async_scheduling=True)
        driver.arrive(1, list(range(1, 13)))
        request = driver.requests[1]
        blocks, hit = manager.get_computed_blocks(request)[:2]
        manager.allocate_slots(request, 6, hit, blocks)
        request.num_computed_tokens = request.num_in_flight_tokens = 6
        manager.allocate_slots(request, 5)
        request.num_computed_tokens, request.num_in_flight_tokens = to, 5
        if made is None:
            with pytest.raises(kvfuzz.GuardUnsupported, match="neither a block's start"):
                manager.allocate_slots(request, 12 - to)
            continue
        manager.allocate_slots(request, 12 - to)
        session = manager.kvfuzz_session
        assert session.divergence is None and made in session.ops
        assert session.lock.events[cut.CUT_IN_FLIGHT] == 1
