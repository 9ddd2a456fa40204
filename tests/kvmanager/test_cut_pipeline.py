"""A failed KV block's cut under vLLM's V2 model runner over a pipeline of two stages (two steps
of a request in flight: the trace's `steps_in_flight` 2), and a synchronous load's failure with
draft tokens, under the asynchronous scheduler (issue 24, 2026-12-06). The guard
(`guard_async._async_sync_cut`, `_async_cut`): a failed load's admission step processed first
where the trace still holds it, the `loaded` then beneath the steps after it (one or two); a
cut after the older steps' `processed`; with drafts, the failure mapped where no step of the
request samples, refused by name where one does (`_drafted`). The "connector cuts" profile's
pipelined share (`connector_cuts._PipelinedCutting`). The vLLM parts skip without vLLM."""

import random
from dataclasses import replace

import pytest

import kvfuzz
from kvfuzz.fuzz.kvmanager import connector, cut
from kvfuzz.strategies.kvmanager import async_connector, connector_cuts
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.connector_ops import Cut, Loaded
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import with_engine

with_vllm = with_engine("vllm")  # (the module's other tests need no vLLM)

# `replace(ASYNC_CONNECTOR, sync_load_failures=True, v2_runner=True, pipeline_stages=2)`
# sessions refused by name before (a failed load's cut "with 2 steps in flight (a
# pipeline's)", a cut "beneath one step in flight"): the cuts, the failed loads beneath both
# steps after the admission, the cuts under the pipeline
PIPELINED = {6: ([], 1, 0), 27: ([], 1, 0), 3: ([Cut(4, 33)], 0, 1),
             75: ([Cut(4, 123), Cut(2, 133)], 0, 2)}
# `replace(ASYNC_CONNECTOR, sync_load_failures=True, speculative="eagle", num_speculative=2)`:
# a failed load with no step of the request sampling (mapped), and the two refused (a padded
# admission's skipped step; a chunk to the prompt's end in flight, the drafts then scheduled)
DRAFTS_MAPPED = (6, 86)
DRAFTS_REFUSED = {2: "2 padded draft rows", 22: "a step of it sampled"}


def workload(**settings):
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import ASYNC_CONNECTOR

    return replace(ASYNC_CONNECTOR, sync_load_failures=True, **settings)


PIPELINE = dict(v2_runner=True, pipeline_stages=2)
DRAFTS = dict(speculative="eagle", num_speculative=2)


def run(seed: int, tmp_path, settings: dict, record: bool = False):
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import run_session

    if record:
        return run_session(seed, lambda m, **s: kvfuzz.record(m, "kvmanager", **s),
                           workload=workload(**settings))
    return run_session(seed, lambda m, **s: kvfuzz.guard(m, "kvmanager", corpus=tmp_path, **s),
                       workload=workload(**settings))


def test_the_profile_makes_pipelined_cuts_in_a_share_of_its_asynchronous_traces():
    traces = [connector_cuts.GENERATOR.generate(0, index) for index in range(100)]
    piped = [t for t in traces if t.steps_in_flight == 2]
    assert 4 <= len(piped) <= 20 and all(t.async_scheduling and not t.window for t in piped)
    ops = [op for t in piped for op in t.ops]
    assert sum(isinstance(op, Cut) for op in ops) >= 5
    assert sum(isinstance(op, Loaded) for op in ops) >= 5
    assert all(from_json(to_json(t)) == t for t in piped)


def test_the_traces_without_the_pipeline_keep_their_ops():
    """The share is drawn after every other draw: a trace not pipelined is the one the profile
    made before (the synchronous draw, then the asynchronous one, from the same stream)."""
    for index in range(60):
        rng = random.Random(index)
        built = connector_cuts.build(random.Random(index), 200)
        if built.steps_in_flight == 1:
            before = connector_cuts._synchronous(rng, 200)
            if rng.random() < connector_cuts.ASYNC:
                before = async_connector.build(rng, 200, connector_cuts._AsyncCutting,
                                               connector_cuts.PROFILE)
            assert built == before


@with_vllm
@pytest.mark.slow
@pytest.mark.parametrize("seed", sorted(PIPELINED))
def test_a_cut_under_a_pipeline_runs_guarded_and_replays(seed, tmp_path):
    guarded = run(seed, tmp_path, PIPELINE)
    session = guarded.manager.kvfuzz_session
    assert session.divergence is None and guarded.finished == guarded.requests
    assert session.header.steps_in_flight == 2
    cuts, two, piped = PIPELINED[seed]
    assert [op for op in session.ops if isinstance(op, Cut)] == cuts
    assert session.lock.events[connector.SYNC_CUT_TWO_IN_FLIGHT] == two
    assert session.lock.events[cut.CUT_PIPELINED] == piped
    recorded = run(seed, tmp_path, PIPELINE, record=True).manager.kvfuzz_session
    assert recorded.trace() == session.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "r"), "vllm.kvmanager").ok
    assert not list(tmp_path.glob("*.json"))


@with_vllm
@pytest.mark.slow
def test_a_lock_step_cutting_beneath_the_last_step_alone_is_caught(tmp_path, monkeypatch):
    """A lock step that takes a failed load as beneath the request's last step alone (the
    one-step rule) drops the cut in session 6, where two steps are beneath it: never a pass."""
    from kvfuzz.fuzz.kvmanager.connector import ConnectorOps

    monkeypatch.setattr(ConnectorOps, "_beneath", lambda self, request: bool(
        self.trace.async_scheduling and request.flights and
        request.computed > request.sync_load[2] == request.computed - request.flights[-1]))
    with pytest.raises((kvfuzz.Mismatch, kvfuzz.GuardUnsupported)):
        run(6, tmp_path, PIPELINE)


@with_vllm
@pytest.mark.slow
@pytest.mark.parametrize("seed", DRAFTS_MAPPED)
def test_a_failed_load_with_draft_tokens_where_nothing_samples_runs_guarded(seed, tmp_path):
    guarded = run(seed, tmp_path, DRAFTS)
    session = guarded.manager.kvfuzz_session
    assert session.divergence is None and guarded.finished == guarded.requests
    events = session.lock.events
    assert events[connector.SYNC_FAILED] == events[connector.SYNC_CUT_IN_FLIGHT] == 1
    assert events["placeholder slots with draft tokens"] and events["rejected drafts rolled back"]
    recorded = run(seed, tmp_path, DRAFTS, record=True).manager.kvfuzz_session
    assert recorded.trace() == session.trace()
    assert kvfuzz.replay(recorded.save(tmp_path / "r"), "vllm.kvmanager").ok


@with_vllm
@pytest.mark.parametrize("seed", sorted(DRAFTS_REFUSED))
def test_a_failed_load_with_draft_tokens_where_a_step_samples_is_refused_by_name(seed,
                                                                                 tmp_path):
    with pytest.raises(kvfuzz.GuardUnsupported, match=DRAFTS_REFUSED[seed]):
        run(seed, tmp_path, DRAFTS)


@with_vllm
def test_finding_with_drafts_vllm_rolls_rejected_drafts_back_from_the_recompute(tmp_path,
                                                                                monkeypatch):
    """Finding (vLLM 0.33.0, `AsyncScheduler` with EAGLE's 2 drafts; docs/upstream-vllm.md,
    "Under a pipeline, and with draft tokens"): session 2's `req-1` (112 tokens, a padded
    admission of its last token and 2 rows after a synchronous load of 111, then a draft step)
    is cut to 48 by its failed block; the skipped admission step leaves its 3 placeholders,
    the recompute's chunk is scheduled before the draft step's output, and that output's
    rejected draft is rolled back from `num_computed_tokens`, which then counts the chunk:
    the next `cache_blocks` is of 47 tokens, below the cut, with 3 placeholders left and
    nothing that samples in flight (the chunk's 64 tokens)."""
    import kvfuzz.fuzz.kvmanager.vllm_scheduler  # noqa: F401  (prepares vLLM's import)
    from kvfuzz.impl.upstream_env import prepare_import

    with prepare_import("vllm"):
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.sched.scheduler import Scheduler
    seen = []
    scan, cache = Scheduler._update_requests_with_invalid_blocks, KVCacheManager.cache_blocks

    def spy_scan(self, requests, *args, **kwargs):
        requests = list(requests)
        result = scan(self, requests, *args, **kwargs)
        seen.extend(("cut", r.num_computed_tokens) for r in requests
                    if r.request_id == "req-1" and r.request_id in result[0])
        return result

    def spy_cache(self, request, n):
        if request.request_id == "req-1" and seen and len(seen) < 3:
            seen.append((n, request.num_output_placeholders, request.num_in_flight_tokens))
        return cache(self, request, n)
    monkeypatch.setattr(Scheduler, "_update_requests_with_invalid_blocks", spy_scan)
    monkeypatch.setattr(KVCacheManager, "cache_blocks", spy_cache)
    with pytest.raises(kvfuzz.GuardUnsupported):
        run(2, tmp_path, DRAFTS)  # (refused at the cut: the session stops there)
    assert seen == [("cut", 48)]
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import run_session

    seen.clear()
    run_session(2, None, workload=workload(**DRAFTS))
    assert seen[:2] == [("cut", 48), (47, 3, 64)]
