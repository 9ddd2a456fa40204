"""`kvfuzz.guard` and `kvfuzz.record` of a live vLLM `KVCacheManager` (fuzz/kvmanager/guard.py):
driven by kvfuzz's own scheduler (the batch lock step's driver) and by vLLM's real v1
`Scheduler` (fuzz/kvmanager/vllm_scheduler.py). The guard's verdict on a trace is the batch
judge's; a guarded mutant raises at its first bad call with a file that replays; what the
trace cannot model is refused before the call is made. Skips without vLLM."""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import kvfuzz
from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.impl.kvmanager.upstream_mutants import MUTATIONS
from kvfuzz.impl.registry import load_attribute
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import Arrive, Sample, Schedule
from tests import guarding
from tests.helpers import needs_engine

pytestmark = needs_engine("vllm")
VLLM = KVMANAGER.catalogue.resolve("vllm.kvmanager")
# The mutants vLLM's scheduler reaches in its sessions here (one full-attention group, no
# watermark, no prompt repeated whole): the others live behind settings it does not use.
SCHEDULER_REACHES = ("exact_fit_refused", "caches_unwritten_block", "evictable_hits_not_counted",
                     "free_head_first", "hit_not_touched", "whole_request_unchecked",
                     "pool_reuse_keeps_hash")


def impl_of(name: str | None):
    return VLLM if name is None else KVMANAGER.catalogue.resolve(f"mutant.vllm.kvmanager.{name}")


def settings(kwargs):
    """The guard's setting the manager does not keep: what its constructor was given."""
    return {"max_in_flight_tokens": kwargs.get("max_in_flight_tokens")}


def guarded_run(trace, name: str | None, corpus_dir, check: bool = True):
    """`trace`'s calls made by kvfuzz's own scheduler (the lock step's driver) on a manager of
    `name` (a mutant, or None: the released class), reached only through the guard."""
    return guarding.guarded_run(KVMANAGER, trace, impl_of(name), corpus_dir, check, settings)


def guard_models(trace):
    """`trace` as far as the guard models it: None where its configuration is one the guard
    refuses (prefix caching off, speculative tokens, EAGLE, tokens in flight, extra retained
    tokens, the hybrid streams' groups: other block sizes, a finer hash, chunked-local or Mamba
    groups, two windows; the KV connector's calls, zeroing, decode context parallelism, HiSparse's
    groups) or one it does not check (KV events and stats: the engine's own consumers drain them);
    else without its steps of no tokens, with every request reading the cache and without
    images (the guard maps a request's LoRA adapter and salt, refuses its multimodal
    inputs)."""
    if not trace.caching or trace.events or trace.stats or trace.lookahead or trace.eagle or \
            trace.async_scheduling or trace.retained or len(set(trace.sizes)) > 1 or \
            trace.hash_size != trace.block_size or trace.local_chunk or trace.mamba_mode or \
            trace.zeroing or trace.dcp > 1 or trace.hisparse or trace.first_window or \
            any(isinstance(op, (Connect, Loaded)) for op in trace.ops):
        return None
    ops = tuple(replace(op, no_cache_read=False, images=()) if isinstance(op, Arrive) else op
                for op in trace.ops if not (isinstance(op, Schedule) and op.chunk == 0))
    return replace(trace, ops=ops)


# The mutants of configurations the guard refuses or of what it leaves to the engine's own
# consumers (KV events, stats): caught on kvfuzz's own traces (tests/kvmanager/test_mutants.py);
# and the connector's, which the corner traces do not reach: guarded in test_guard_connector.py.
NOT_GUARDED = ("lookahead_not_allocated", "in_flight_ignored", "skip_reading_ignored",
               "zero_tokens_accepted", "stats_preempted_as_new", "reset_not_in_stats",
               "hit_report_skipped", "events_unannotated", "retained_tokens_freed",
               "eagle_block_kept", "hybrid_hit_off_grid", "hybrid_caches_off_grid",
               "partial_tail_past_prompt", "local_chunk_freed_early", "mamba_state_freed",
               "eagle_margin_dropped", "cross_sized_by_decoder", "mamba_align_state_kept",
               "mamba_align_lookahead_state", "external_on_null_block", "delayed_load_cached",
               "reserved_blocks_ignored", "loaded_blocks_zeroed", "zeroing_skips_first_block",
               "connector_hit_diverged",
               # deferred frees and the window's removal before request_finished: the corner
               # traces make neither call (guarded in test_guard_deferred.py)
               "deferred_free_reversed", "deferred_free_first_group_only",
               "finished_window_kept",
               # zeroing: the corner traces are of one precision (test_guard_zeroing.py)
               "new_block_not_zeroed", "zeroing_records_kept",
               "partial_load_skips_all_zeroing",
               # HiSparse's groups: the guard refuses them (its own traces: test_hisparse.py)
               "hisparse_retained_hit_kept", "hisparse_published_before_durable",
               "hisparse_unpinned_reused_first", "hisparse_host_tail_not_published",
               "hisparse_free_unpins_head_first", "hisparse_resident_lookahead_unbacked",
               # the hybrid coordinator's hit search: the corner traces have one group (Mamba
               # "align" under vLLM's scheduler: test_guard_mamba.py; kvfuzz's own traces:
               # test_align.py, test_mutants.py)
               "mamba_align_hit_short", "mamba_align_partial_hit_ignored",
               # a connector over groups of different block sizes: the corner traces have one
               # size and no connector ("connector sizes": test_mutants.py's ALONE)
               "external_to_scheduler_block",
               # speculative blocks of a Mamba group in mode "none" or "all": the corner
               # traces have no Mamba group (the "mamba" profile's: test_mutants.py's ALONE)
               "mamba_speculative_one_short")


def corner_trace(index: int, impl):
    """The generator's corner traces of its plain profile, the configuration the guard models
    (the other profiles set what it refuses): seeded apart, "kvmanager/5[corners]"."""
    from kvfuzz.strategies.kvmanager.generator import build_corners
    from kvfuzz.strategies.sources import seeded_random

    return build_corners(seeded_random("kvmanager/5[corners]", 0, index), 200)


def test_the_guards_verdict_is_the_batch_judges_on_every_mutant(tmp_path):
    guarded = [name for name in MUTATIONS if name not in NOT_GUARDED]
    # 8 corner traces a mutant: of the first 40, the batch judge catches 16 of the 35 guarded
    # mutants, the last at index 5; the other 19 belong to settings the corner traces never
    # have (Mamba "align", keys, EAGLE, MTP, padding), and 40 traces each of them were two
    # thirds of the test's time (2026-12-05; 12 a mutant until CI took 1,839 s, 2026-12-07)
    caught = guarding.assert_guard_verdicts_are_the_batch_judges(
        KVMANAGER, VLLM, [impl_of(name) for name in guarded], tmp_path, traces=8,
        settings=settings, modelled=guard_models, generate=corner_trace)
    assert len(caught) >= 12, sorted(set(guarded) - {c.rsplit(".", 1)[1] for c in caught})


def test_the_released_manager_runs_guarded_and_its_record_replays(tmp_path):
    guarding.assert_released_runs_guarded_and_its_record_replays(KVMANAGER, VLLM, tmp_path, 120,
                                                                 settings, modelled=guard_models)


def scheduler_session(seed: int, name: str | None, corpus_dir, check: bool = True,
                      workload: str | None = None):
    """Session `seed` of vLLM's scheduler (`workload`: the name of one in `vllm_scheduler`, None
    its default), its manager an instance of `name` (None: the released class), guarded (or
    recorded)."""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    wrap = kvfuzz.guard if check else kvfuzz.record
    options = dict(impl=impl_of(name).name, corpus=corpus_dir) if check else {}
    more = {} if workload is None else {"workload": getattr(vllm_scheduler, workload)}
    return vllm_scheduler.run_session(
        seed, lambda manager, **settings: wrap(manager, "kvmanager", **settings, **options),
        manager_class=None if name is None else impl_of(name).load(), **more)



def clean_and_replaying(seed: int, workload: str, corpus_dir):
    """Session `seed` of the released manager under `workload` (a name in `vllm_scheduler`),
    asserted guarded clean with every request finished, the same as the unguarded run (steps,
    scheduled tokens, preemptions, loads), recorded equal to the guarded trace and replaying
    clean on `vllm.kvmanager`; the guarded session's result is returned for its events."""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler

    run = scheduler_session(seed, None, corpus_dir, workload=workload)
    guarded = run.manager.kvfuzz_session
    assert guarded.divergence is None and run.finished == run.requests == 10, run
    plain = vllm_scheduler.run_session(seed, workload=getattr(vllm_scheduler, workload))
    assert (run.steps, run.scheduled_tokens, run.preemptions, run.loads) == \
        (plain.steps, plain.scheduled_tokens, plain.preemptions, plain.loads)
    recorded = scheduler_session(seed, None, corpus_dir, check=False,
                                 workload=workload).manager.kvfuzz_session
    assert recorded.trace() == guarded.trace()
    assert kvfuzz.replay(recorded.save(Path(corpus_dir) / "recorded"), "vllm.kvmanager").ok
    return run

def test_vllms_scheduler_runs_its_sessions_guarded_with_no_divergence(tmp_path):
    sampled = preempted = 0
    for seed in range(5):
        session = scheduler_session(seed, None, tmp_path)
        guarded = session.manager.kvfuzz_session
        assert session.finished == session.requests == 10, session
        assert guarded.divergence is None and len(guarded.ops) > 100
        preempted += session.preemptions
        sampled += any(isinstance(op, Sample) for op in guarded.ops)
        recorded = scheduler_session(seed, None, tmp_path, check=False).manager.kvfuzz_session
        assert recorded.trace() == guarded.trace()
        path = recorded.save(tmp_path / "recorded")
        assert kvfuzz.replay(path, "vllm.kvmanager").ok
    assert preempted and sampled  # the sessions preempt, and a preempted request had sampled
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize("name", SCHEDULER_REACHES)
def test_a_guarded_mutant_raises_in_vllms_scheduler_with_a_file_that_replays(name, tmp_path):
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: scheduler_session(seed, name, tmp_path), f"mutant.vllm.kvmanager.{name}",
        "vllm.kvmanager", seeds=5)


def released_manager(blocks: int = 8, window: int = 0):
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver

    return KVManagerDriver(load_attribute(VLLM.path), blocks, 4, window, 64)


def guarded_arrival(tmp_path, tokens: int, blocks: int = 8, window: int = 0, **options):
    """The released manager guarded, and request 1 of `tokens` tokens arrived and looked up:
    (the manager, its guard, the request, the hit's blocks, the hit's length)."""
    driver = released_manager(blocks, window)
    guarded = kvfuzz.guard(driver.manager, "kvmanager", corpus=tmp_path, **options)
    driver.arrive(1, list(range(tokens)))
    request = driver.requests[1]
    hit_blocks, hit, _ = guarded.get_computed_blocks(request)
    return driver.manager, guarded, request, hit_blocks, hit


def test_what_the_trace_cannot_model_is_refused_before_the_call(tmp_path):
    manager, guarded, request, blocks, hit = guarded_arrival(tmp_path, 9)
    free = manager.block_pool.get_num_free_blocks()
    with pytest.raises(kvfuzz.GuardUnsupported, match="num_lookahead_tokens=2"):
        guarded.allocate_slots(request, 9, hit, blocks, num_lookahead_tokens=2)
    assert manager.block_pool.get_num_free_blocks() == free  # never made
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"cache_blocks of request '1', whose "
                                                      r"KV load is not in flight"):
        guarded.cache_blocks(request, 4)
    assert guarded.usage == manager.usage  # reads go through
    # A manager used before it was guarded: the oracle would start from another state.
    blocks, hit, _ = manager.get_computed_blocks(request)
    manager.allocate_slots(request, 9, hit, blocks)
    with pytest.raises(kvfuzz.GuardUnsupported, match="guard it before its first call"):
        kvfuzz.guard(manager, "kvmanager")
    # A manager of decode context parallelism: the live header has no ranks.
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver

    dcp_manager = KVManagerDriver(VLLM.load(), 8, 4, 0, 64, dcp=2).manager
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"context parallelism \(dcp, pcp world "
                                                      r"sizes \[\(2, 1\)\]\)"):
        kvfuzz.guard(dcp_manager, "kvmanager")
    # HiSparse's groups (a host source, an indexer, resident pages, a hot region): the guard's
    # trace has one full-attention group and at most a window (kvfuzz's own traces: the
    # "hisparse" profile)
    hisparse_manager = KVManagerDriver(VLLM.load(), 8, 4, 0, 64, hisparse=8).manager
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"KV-cache groups \['FullAttentionSpec', "
                                                      r"'FullAttentionSpec', 'HiSparseResi"):
        kvfuzz.guard(hisparse_manager, "kvmanager")


def test_a_target_without_a_guard_says_which_have_one():
    with pytest.raises(ValueError, match=r"target 'extend' has no live guard \(targets with "
                                         r"one: allocator, mamba, swa, blockpool, kvmanager\)"):
        kvfuzz.guard(object(), "extend")


def test_a_recording_stops_at_the_formats_op_limit_and_a_long_divergence_is_shrunk(tmp_path):
    limit = KVMANAGER.codec.max_ops
    long_trace = next(filter(None, (guard_models(KVMANAGER.generator.generate(0, i))
                                    for i in range(3, 60))))
    recorded = guarded_run(long_trace, None, tmp_path, check=False)
    assert 0 < len(recorded.ops)
    # A recording past the limit: the first `limit` ops, a file the codec reads.
    recorded.ops[:] = (recorded.ops * (limit // len(recorded.ops) + 2))[:limit]
    recorded.step(recorded.ops[0])
    assert len(recorded.ops) == limit and recorded.full
    assert corpus.load(recorded.save(tmp_path / "long"))[1].ops == tuple(recorded.ops)
    # A guard past the limit: the divergence is shrunk until a file holds it.
    for index in range(60):
        trace = guard_models(KVMANAGER.generator.generate(0, index))
        if trace and KVMANAGER.check(trace, impl_of("free_head_first")).status == DIVERGE:
            break
    session = guarded_run(trace, "free_head_first", tmp_path)
    found = session.divergence
    assert found is not None
    session.spent, session.divergence = False, None
    session.ops[:0] = [Sample(999, 1)] * limit  # ops that resolve to nothing, ahead of it
    problems = [line for line in found.lines if line[0] not in ("call", "before")]
    with pytest.raises(kvfuzz.Mismatch) as raised:
        session._report(problems, True, None)
    shrunk = raised.value.divergence
    assert len(shrunk.input.ops) <= len(found.input.ops) < limit
    assert kvfuzz.replay(shrunk.saved_path, shrunk.impl).divergences[0].signature == \
        found.signature


SESSION = """
from kvfuzz.fuzz.kvmanager.vllm_scheduler import run_session
session = run_session(3)
manager = session.manager
print(type(manager).__name__, len(manager.kvfuzz_session.ops),
      manager.kvfuzz_session.divergence is None, session.finished)
"""


@pytest.mark.parametrize("record", [False, True], ids=["guard", "record"])
def test_kvfuzz_guard_switches_it_on_inside_an_unchanged_engine(record, tmp_path):
    """The scheduler session builds its manager as vLLM does (no wrap): `kvfuzz guard` makes
    that construction come back guarded, in the command's own Python process."""
    command = [sys.executable, "-m", "kvfuzz.fuzz.cli", "guard", "kvmanager", "--corpus",
               str(tmp_path), *(["--record"] if record else []), "--", sys.executable, "-c",
               SESSION]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parents[2])
    assert ran.returncode == 0, ran.stderr[-3000:]
    kind, ops, clean, finished = ran.stdout.split()
    assert kind == "GuardedManager" and int(ops) > 100 and clean == "True" and finished == "10"
    saved = list(tmp_path.glob("kvmanager-*.json"))
    if not record:
        assert not saved  # nothing diverged
        return
    assert len(saved) == 1 and f"recorded {ops} ops of kvmanager in" in ran.stderr
    assert len(corpus.load(saved[0])[1].ops) == int(ops)
    assert kvfuzz.replay(saved[0], "vllm.kvmanager").ok


def test_with_unsupported_stop_an_unmodelled_call_goes_through_once_said(tmp_path, capsys):
    manager, guarded, request, blocks, hit = guarded_arrival(tmp_path, 9,
                                                             on_unsupported="stop")
    free = manager.block_pool.get_num_free_blocks()
    got = guarded.allocate_slots(request, 9, hit, blocks, num_lookahead_tokens=2)
    assert got is not None and manager.block_pool.get_num_free_blocks() < free  # made, once
    assert "num_lookahead_tokens=2; the guard stops here" in capsys.readouterr().err
    session = guarded.kvfuzz_session
    assert session.spent and not session.checking
    ops = len(session.ops)
    guarded.free(request)  # unchecked, unrecorded from now on
    assert len(session.ops) == ops and manager.block_pool.get_num_free_blocks() == free
    with pytest.raises(ValueError, match="on_unsupported is 'never'"):
        kvfuzz.guard(released_manager().manager, "kvmanager", on_unsupported="never")
