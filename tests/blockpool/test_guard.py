"""`kvfuzz.guard` and `kvfuzz.record` of a live vLLM `BlockPool` (fuzz/blockpool/guard.py): the
pool's calls by block id, made by kvfuzz's own batch driver and by vLLM's real v1 scheduler and
KV-cache manager (fuzz/kvmanager/vllm_scheduler.py, the pool guarded where the coordinator
holds it). The guard's verdict on a trace is the batch judge's; a guarded mutant raises at its
first bad call with a file that replays; what the trace cannot model is refused before the
call is made. Skips without vLLM."""

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import kvfuzz
from kvfuzz.fuzz.blockpool.target import BLOCKPOOL
from kvfuzz.fuzz.engine import corpus
from kvfuzz.impl.blockpool.upstream_mutants import MUTATIONS
from kvfuzz.strategies.blockpool.trace import CachePartial, Move
from tests import guarding
from tests.helpers import needs_engine

pytestmark = needs_engine("vllm")
VLLM = BLOCKPOOL.catalogue.resolve("vllm.blockpool")
# The mutants the scheduler's traffic reaches here (one full-attention group, no offloading,
# no eviction or reset, no prompt cached twice): the others live behind calls it does not make.
SCHEDULER_REACHES = ("freed_uncached_reused_last", "freed_cached_reused_first",
                     "reuse_keeps_hash", "touch_leaves_on_queue", "touch_counts_twice",
                     "exact_fit_refused")


# What the guard does not check: KV events (the engine's own consumer takes them), residency
# metrics, and partial entries and their copies (refused: docs/upstream-vllm.md). Their mutants
# are caught on kvfuzz's own traces (tests/blockpool/test_mutants.py), not here.
# usage_counts_null_block is wrong before any call: kvfuzz.guard raises Mismatch as it opens
# (it checks the pool's state first), which this test's guarded driver cannot go through.
NOT_GUARDED = ("stored_parent_is_itself", "reuse_not_published", "reset_not_published",
               "partial_entry_one_unit_long", "copy_forgets_token_count", "lookahead_one_short",
               "usage_counts_null_block")


def impl_of(name: str | None):
    return VLLM if name is None else BLOCKPOOL.catalogue.resolve(f"mutant.vllm.blockpool.{name}")


def guard_models(trace):
    """`trace` if the guard models every call of it (one hash unit a block, no KV events or
    metrics, no partial entries or copies), else None."""
    return trace if trace.scale == 1 and not (trace.events or trace.metrics) and not any(
        isinstance(op, (CachePartial, Move)) for op in trace.ops) else None


def test_the_guards_verdict_is_the_batch_judges_on_every_mutant(tmp_path):
    guarded = [name for name in MUTATIONS if name not in NOT_GUARDED]
    caught = guarding.assert_guard_verdicts_are_the_batch_judges(
        BLOCKPOOL, VLLM, [impl_of(name) for name in guarded], tmp_path, modelled=guard_models)
    assert caught == {impl_of(name).name for name in guarded}


def test_the_released_pool_runs_guarded_and_its_record_replays(tmp_path):
    guarding.assert_released_runs_guarded_and_its_record_replays(BLOCKPOOL, VLLM, tmp_path, 60,
                                                                 modelled=guard_models)


def scheduler_session(seed: int, name: str | None, corpus_dir, check: bool = True, **more):
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import run_session

    wrap = kvfuzz.guard if check else kvfuzz.record
    options = dict(impl=impl_of(name).name, corpus=corpus_dir) if check else {}
    return run_session(seed, wrap_pool=lambda pool: wrap(pool, "blockpool", **options),
                       pool_class=None if name is None else impl_of(name).load(), **more)


def test_vllms_scheduler_runs_with_its_pool_guarded_and_no_divergence(tmp_path):
    kinds = Counter()
    for seed in range(5):
        session = scheduler_session(seed, None, tmp_path)
        guarded = session.pool.kvfuzz_session
        assert session.finished == session.requests == 10, session
        assert guarded.divergence is None and len(guarded.ops) > 100
        kinds.update(type(op).__name__ for op in guarded.ops)
        recorded = scheduler_session(seed, None, tmp_path, check=False).pool.kvfuzz_session
        assert recorded.trace() == guarded.trace()
        assert kvfuzz.replay(recorded.save(tmp_path / "recorded"), "vllm.blockpool").ok
    # the manager's whole repertoire with this model: lookups, hits, new blocks, caching, frees
    assert {"Probe", "TouchIds", "Alloc", "CacheIds", "FreeIds"} <= set(kinds), kinds
    assert not list(tmp_path.glob("*.json"))


def test_the_pool_and_its_manager_guarded_at_once(tmp_path):
    session = scheduler_session(1, None, tmp_path, wrap=lambda manager, **settings: kvfuzz.guard(
        manager, "kvmanager", corpus=tmp_path, **settings))
    assert session.manager.kvfuzz_session.divergence is None
    assert session.pool.kvfuzz_session.divergence is None
    # the manager's guard reads through it (its `block_pool`, what the scheduler reaches through
    # the manager, a proxy that maps a deferred free's release onto the same pool)
    assert session.manager.coordinator.block_pool is session.pool
    assert session.manager.block_pool.kvfuzz_session is session.pool.kvfuzz_session


@pytest.mark.parametrize("name", SCHEDULER_REACHES)
def test_a_guarded_mutant_pool_raises_in_vllms_scheduler_with_a_file_that_replays(name,
                                                                                  tmp_path):
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: scheduler_session(seed, name, tmp_path), f"mutant.vllm.blockpool.{name}",
        "vllm.blockpool", seeds=3)


# vLLM's CPU offloading connector in the session: its scheduler side vLLM's own, its worker a
# double that finishes every transfer within the step (fuzz/kvmanager/offload_worker.py).
def offload_session(seed: int, name: str | None, corpus_dir, **more):
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import Workload

    return scheduler_session(seed, name, corpus_dir, workload=Workload(offload_bytes=1 << 18),
                             **more)


def test_the_pool_runs_guarded_under_the_cpu_offloading_connector(tmp_path):
    """The connector's traffic reaches the pool (stores, pins of the blocks they read, loads
    admitted as external hits with their caching delayed, frees held back for a store) and the
    released pool agrees with the oracle after every call; a pool mutant is caught there."""
    loads = stores = 0
    for seed in range(3):
        session = offload_session(seed, None, tmp_path)
        assert session.finished == session.requests == 10, session
        assert session.pool.kvfuzz_session.divergence is None
        loads, stores = loads + session.loads, stores + session.stores
    assert loads and stores, (loads, stores)
    guarding.assert_mutant_raises_in_sessions(
        lambda seed: offload_session(seed, "touch_counts_twice", tmp_path),
        "mutant.vllm.blockpool.touch_counts_twice", "vllm.blockpool", seeds=3)


def test_the_manager_under_the_offloading_connector_runs_guarded(tmp_path):
    """The manager's guard maps the connector's calls (fuzz/kvmanager/guard_connector.py):
    its loads admitted as `connect` ops, reported as `loaded`, and the released manager agrees
    after every call, with the pool guarded beneath it too."""
    from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded

    kinds = set()
    for seed in range(3):
        session = offload_session(seed, None, tmp_path, wrap=lambda manager, **settings:
                                  kvfuzz.guard(manager, "kvmanager", corpus=tmp_path, **settings))
        guarded = session.manager.kvfuzz_session
        assert session.finished == session.requests == 10, session
        assert guarded.divergence is None and session.pool.kvfuzz_session.divergence is None
        kinds |= {type(op) for op in guarded.ops}
    assert {Connect, Loaded} <= kinds
    assert not list(tmp_path.glob("*.json"))


def released_pool(blocks: int = 8):
    return impl_of(None).load()(num_gpu_blocks=blocks, enable_caching=True, hash_block_size=16)


def test_what_the_trace_cannot_model_is_refused_before_the_call(tmp_path):
    pool = released_pool()
    guarded = kvfuzz.guard(pool, "blockpool", corpus=tmp_path)
    blocks = guarded.get_new_blocks(2)
    with pytest.raises(kvfuzz.GuardUnsupported, match=r"cache_partial_block\(\) is not "
                                                      r"modelled by the blockpool trace"):
        guarded.cache_partial_block(None, blocks[0], 3, 0, 16)
    other = released_pool()
    with pytest.raises(kvfuzz.GuardUnsupported, match="not one of this pool's blocks"):
        guarded.free_blocks([other.blocks[3]])
    assert [b.ref_cnt for b in other.blocks[1:]] == [0] * 7  # never made
    with pytest.raises(kvfuzz.GuardUnsupported, match="block size 4, hash block size 16"):
        guarded.cache_full_blocks(type("R", (), {"block_hashes": [b"x"]})(), blocks, 0, 1, 4, 0)
    assert all(b.block_hash is None for b in pool.blocks)
    assert guarded.get_num_free_blocks() == 5 and guarded.null_block is pool.null_block  # reads
    # The pool's own refusal reaches the engine as it is, and agrees with the oracle.
    with pytest.raises(ValueError, match="Cannot get 6 free blocks"):
        guarded.get_new_blocks(6)
    guarded.free_blocks(blocks)
    assert guarded.kvfuzz_session.divergence is None and len(guarded.kvfuzz_session.ops) == 3
    # A pool used before it was guarded: the oracle would start from another state.
    pool.get_new_blocks(1)
    with pytest.raises(kvfuzz.GuardUnsupported, match="guard it before its first call"):
        kvfuzz.guard(pool, "blockpool")
    with pytest.raises(kvfuzz.GuardUnsupported, match="at most 2048"):
        kvfuzz.guard(released_pool(4096), "blockpool")


def test_a_double_free_by_the_pools_caller_is_a_divergence_that_replays(tmp_path):
    """The caller breaks the pool's contract (a block freed twice): the pool keeps a negative
    reference count, which the invariants reject, live and in the replay alike."""
    guarded = kvfuzz.guard(released_pool(), "blockpool", corpus=tmp_path)
    blocks = guarded.get_new_blocks(1)
    guarded.free_blocks(blocks)
    with pytest.raises(kvfuzz.Mismatch, match="negative reference counts") as raised:
        guarded.free_blocks(blocks)
    found = raised.value.divergence
    assert [d.signature for d in kvfuzz.replay(found.saved_path, "vllm.blockpool").divergences] \
        == [found.signature]


SESSION = """
from kvfuzz.fuzz.kvmanager.vllm_scheduler import run_session
session = run_session(2)
pool = session.manager.block_pool
print(type(pool).__name__, len(pool.kvfuzz_session.ops), session.finished)
"""


def test_kvfuzz_guard_blockpool_records_inside_an_unchanged_engine(tmp_path):
    """vLLM's coordinator builds its pool by name: `kvfuzz guard blockpool` makes it come back
    recorded, and the recording is saved at exit and replays."""
    command = [sys.executable, "-m", "kvfuzz.fuzz.cli", "guard", "blockpool", "--record",
               "--corpus", str(tmp_path), "--", sys.executable, "-c", SESSION]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parents[2])
    assert ran.returncode == 0, ran.stderr[-3000:]
    kind, ops, finished = ran.stdout.split()
    assert kind == "GuardedPool" and int(ops) > 100 and finished == "10"
    saved = list(tmp_path.glob("blockpool-*.json"))
    assert len(saved) == 1 and f"recorded {ops} ops of blockpool in" in ran.stderr
    assert len(corpus.load(saved[0])[1].ops) == int(ops)
    assert kvfuzz.replay(saved[0], "vllm.blockpool").ok


# corpus/ keeps one session of vLLM's own scheduler recorded on each of its objects.
RECORDED_SEED = 1


@pytest.mark.parametrize("target, connector", [("kvmanager", False), ("blockpool", False),
                                               ("kvmanager", True)],
                         ids=["kvmanager", "blockpool", "kvmanager-fake-connector"])
def test_the_corpus_holds_a_recorded_scheduler_session_that_replays_clean(target, connector):
    """The committed recording is what the scheduler records now (vLLM's scheduler, the fake
    connector and the guard's mapping are deterministic for a seed), and the released class
    runs it clean."""
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import recording
    from kvfuzz.fuzz.targets import TARGETS
    from tests.conftest import CORPUS

    owner = TARGETS[target]
    trace = recording(RECORDED_SEED, target, connector)
    path = Path(CORPUS) / owner.file_name(trace)
    assert path.exists(), f"regenerate it: kvfuzz.fuzz.engine.corpus.save(TARGETS[{target!r}], " \
                          f"recording({RECORDED_SEED}, {target!r}, {connector}), 'corpus')"
    _, saved = corpus.load(path)
    assert saved == trace and saved.note == trace.note
    assert kvfuzz.replay(path, f"vllm.{target}").ok
