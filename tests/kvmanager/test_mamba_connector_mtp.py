"""Multi-module MTP's held-back tokens with EAGLE's drop beside a Mamba "align" group and a KV
connector's ops (since 2026-12-07: `fuzz/kvmanager/align_external_mtp.py`): the "mamba
connector" profile draws k of 2 to min(4, hash unit) in a share of its EAGLE traces after every
other draw (the others as before it) and the codec reads them back, refusing k above the hash
unit still; on the released vLLM its first MTP traces run clean, a load done caching k - 1
tokens short and keying the prompt's tail at its cacheable tokens; a judge blind to the held-back
tokens on a load's caching, or to the copy of a tail keyed there whose entry an eviction dropped,
is wrong there. The vLLM parts are slow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvfuzz.fuzz.kvmanager import align_external_mtp
from kvfuzz.strategies.inputs import FormatError
from kvfuzz.strategies.kvmanager import mamba_connector, mamba_eagle
from kvfuzz.strategies.kvmanager.codec import from_json
from kvfuzz.strategies.kvmanager.connector_ops import Connect
from kvfuzz.strategies.kvmanager.trace import to_json
from tests.helpers import agreeing_features, divergence, needs_engine

COUNT = 100  # seed 0's first traces of the profile read here (28, 60, 88, 93, 96 with MTP)
FIRST = 4  # the profile's first MTP traces of seed 0 the release runs here
LOADED = 28  # r15's load done at op 165: 6 tokens loaded, k = 2, blocks of 2
EVICTED = 88  # r10's tail keyed at 6 of its 7 loaded tokens, evicted, its copy offered at 159


def _vllm(test):
    """The test marked as those that import vLLM are (slow; skipped without it)."""
    for mark in needs_engine("vllm"):
        test = mark(test)
    return test


def _mtp_traces(count: int) -> list:
    traces = (mamba_connector.GENERATOR.generate(0, index) for index in range(COUNT))
    return [trace for trace in traces if trace.prefill_lookahead >= 2][:count]


def test_the_profile_draws_mtp_last_in_a_share_of_its_eagle_traces(monkeypatch):
    made = [mamba_connector.GENERATOR.generate(0, index) for index in range(COUNT)]
    with monkeypatch.context() as patched:
        patched.setattr(mamba_eagle, "MTP_SHARE", 0.0)
        off = [mamba_connector.GENERATOR.generate(0, index) for index in range(COUNT)]
    mtp = [index for index, trace in enumerate(made) if trace.prefill_lookahead]
    assert mtp == [LOADED, 60, EVICTED, 93, 96], mtp
    assert [replace(trace, prefill_lookahead=0) for trace in made] == off  # nothing else moved
    for index in mtp:
        trace = made[index]
        assert trace.eagle and 2 <= trace.prefill_lookahead <= min(4, trace.hash_size)
        assert any(isinstance(op, Connect) for op in trace.ops)
        assert from_json(to_json(trace)) == trace  # (the codec takes the three)
    # k above the hash unit stays refused (vLLM's scheduler stalls or its manager asserts)
    above = replace(made[LOADED], prefill_lookahead=made[LOADED].hash_size + 1)
    with pytest.raises(FormatError, match="prefill_lookahead.*hash unit with EAGLE"):
        from_json(to_json(above))


@_vllm
def test_the_release_loads_and_resumes_with_tokens_held_back_clean():
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    released = KVMANAGER.catalogue.resolve("vllm.kvmanager")
    events = agreeing_features("kvmanager", released, _mtp_traces(FIRST))
    for event in align_external_mtp.OWN:
        assert events[event], (event, events)
    assert events["config: multi-token prediction (prefill lookahead)"] == FIRST


@_vllm
def test_a_judge_caching_a_load_done_without_the_held_back_tokens_is_wrong(monkeypatch):
    """A load reported done caches k - 1 tokens short (`get_num_cacheable_tokens`): a judge
    predicting it with k = 1 is wrong on the release at the load's report."""
    from kvfuzz.fuzz.kvmanager.align_caching_external import AlignCachingExternal

    trace = mamba_connector.GENERATOR.generate(0, LOADED)
    assert trace.prefill_lookahead == 2
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    loaded = AlignCachingExternal._caching_loaded

    def blind(self, *args):
        trace, self.trace = self.trace, replace(self.trace, prefill_lookahead=0)
        try:
            return loaded(self, *args)
        finally:
            self.trace = trace
    monkeypatch.setattr(AlignCachingExternal, "_caching_loaded", blind)
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what == \
        "which blocks cached at op 165 of 220: r15's load done", found and found.report()


@_vllm
def test_a_judge_blind_to_a_held_back_tails_evicted_copy_is_wrong(monkeypatch):
    """The tail a load done keyed at its cacheable tokens (6 of 7), evicted before the
    resumption, whose copy-on-write copy is then offered under no hash: a judge that lets only
    a tail keyed at the computed tokens through reports the release."""
    trace = mamba_connector.GENERATOR.generate(0, EVICTED)
    assert trace.prefill_lookahead == 2
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    monkeypatch.setattr(align_external_mtp.AlignExternalMtp, "copied_tail",
                        lambda self, rid: self.tails.get(rid))
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what.startswith("boundary offload at op 159"), \
        found and found.report()


PROMPT = [11, 25, 22, 31, 9, 32, 2, 17]  # 8 tokens in blocks of 4, hashed per 2: tail at 6


def _loaded_then_replayed(k: int) -> dict:
    """vLLM's manager beside a Mamba "align" group (blocks of 4, hashed per 2, EAGLE's drop,
    prefill lookahead k): r1's 8-token prompt loaded asynchronously to 7 tokens (a P/D
    decoder's load of all but its last token), reported done, resumed a token and decoded a
    token; then r2 with the same prompt looked up. What the release does at each call."""
    from kvfuzz.impl.kvmanager.driver import KVManagerDriver
    from tests.kvmanager.test_guard import VLLM

    driver = KVManagerDriver(VLLM.load(), 16, 4, 0, 64, mamba_mode="align", hash_block_size=2,
                             eagle=True, prefill_lookahead=k)
    manager = driver.manager
    mamba = manager.coordinator.single_type_managers[1]
    driver.arrive(1, PROMPT)
    driver.connector_lookup(1)
    driver.connect(1, 0, 0, 7, True, 0, False, False)
    driver.set_computed(1, 7, "waiting")
    driver.cache_blocks(1, 7)  # the load reported done: `_update_waiting_for_remote_kv`
    loaded = mamba.req_to_blocks["1"][(7 - 1) // 4]  # the block of the 7 tokens' state
    seen = {"keyed": loaded.block_hash_num_tokens, "loaded": loaded.block_id}
    driver.resume(1, 1, False)
    driver.set_computed(1, 8, "running")
    seen["copies"] = [(c.src_block_id, c.dst_block_id)
                      for c in manager.take_kv_cache_block_copies()[0]]
    seen["offers"] = manager.take_boundary_state_offloads().get("1", [])
    driver.append_token(1, 5)
    driver.allocate_slots(1, 1, 0, False)
    driver.set_computed(1, 9, "running")
    driver.arrive(2, PROMPT)
    _, seen["hit"], _ = driver.get_computed_blocks(2)
    seen["mamba_hit"] = [b.block_id for b in driver.hits[2].blocks[1]]
    return seen


@_vllm
def test_the_release_keys_a_loaded_state_under_a_shorter_prefix():
    """A finding (vLLM 0.33.0, 2026-12-07; docs/upstream-vllm.md, "Multi-module MTP's
    held-back tokens with a KV connector"): with k = 2 a load of 7 tokens reported done caches
    k - 1 = 1 token short, 6, the prompt's tail boundary, and `_cache_partial_tail_block` keys
    it on the block holding the loaded state, the state of 7 tokens; the resumed step copies
    that block and offers the copy to the connector as the state of 6 tokens, and a replay of
    the same prompt hits 6 on the copy: its step from token 6 starts from a state that has
    folded token 6 in already. With k = 1 nothing is keyed and the replay hits nothing."""
    seen = _loaded_then_replayed(2)
    assert seen["keyed"] == 6, seen
    (source, copy), = seen["copies"]
    assert source == seen["loaded"] and seen["offers"] == [(1, copy, 6)], seen
    assert seen["hit"] == 6 and seen["mamba_hit"][-1] == copy, seen
    plain = _loaded_then_replayed(1)
    assert plain["keyed"] is None and plain["copies"] == [] and plain["hit"] == 0, plain


@_vllm
def test_the_release_stalls_after_a_load_with_two_modules():
    """The stall finding of 2026-12-07 (docs/upstream-vllm.md, "Multi-module MTP with EAGLE's
    drop beside the group": `_reserve_prefill_lookahead` cutting a chunk short of the prompt's
    last block boundary, then `_mamba_block_aligned_split`'s mid-block stop always within k of
    the end), reached with 2 modules under the fake KV connector: `MAMBA_EAGLE_CONNECTOR` made
    multi-module (k = 2, hashed per block) runs session 0's 5,000 steps with 9 of 10 requests
    finished (req-1, a 157-token prompt with 150 tokens from the connector: 150-152, 152-156 cut
    to 152-155, then nothing), where without the connector 2 modules never stall
    (`MAMBA_EAGLE_MTP`, 100 sessions). Sessions 1 to 9 run guarded clean and replaying
    (2026-12-07)."""
    from kvfuzz.fuzz.kvmanager import vllm_scheduler, vllm_workloads

    workload = replace(vllm_workloads.MAMBA_EAGLE_CONNECTOR, mtp_modules=0)
    run = vllm_scheduler.run_session(0, workload=workload)
    assert (run.finished, run.requests, run.steps) == (9, 10, 5000), run
