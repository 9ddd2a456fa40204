"""Mamba's shared-prefix checkpoint under asynchronous scheduling beside an "align" group (issue
24, index 2294; docs/upstream-vllm.md, "Mamba's shared-prefix checkpoint beside the group"): the
reduced mode judges a `settle` only as vLLM's `update_from_output` makes one
(`align_async.settle_made`: after its output's `sample`, caching the request's tokens but the
last), so a settle whose step is still counted in flight resolves to nothing; on the release
index 2294's shrunk case agrees so and crashed vLLM's `cache_full_blocks` without the rule. The
"mamba align" profile then draws the setting in asynchronous traces too (their chunks cut at the
junction and its state keyed with tokens in flight), and MAMBA_ASYNC_SHARED_PREFIX runs guarded
with every settle of vLLM's AsyncScheduler made. The vLLM parts are slow."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from kvfuzz.fuzz.kvmanager import align_async, align_shared_prefix
from kvfuzz.strategies.kvmanager import hybrid, mamba_shared_prefix
from kvfuzz.strategies.kvmanager.codec import from_json
from tests.helpers import agreeing_features, with_engine

_ENGINE = with_engine("vllm")  # (slow: it imports vLLM)
# seed 0's first "mamba align" traces drawing the setting with tokens in flight (265 drafted;
# 203 before the generator's settle shapes (2026-12-06) changed the drafted draw's consumption of the trace's random stream)
ASYNC_DRAWN = (253, 265, 373)

# "mamba align" index 2294 as drawn before main's drafted share (2026-12-06), the shared-prefix
# checkpoint forced on, shrunk: r13's 2-token prompt hits 1 token (EAGLE's boundary inside a
# block of 2), its 1-token step in flight; a `settle` with no output (and one after `processed`
# with no sample either): `cache_blocks(r13, 1)` keyed the block holding the state after 2
# tokens under the 1-token hash, and the next `cache_blocks(r13, 2)` tripped the assertion
SHRUNK_2294 = {
    "format": "kvfuzz-kvmanager-trace/1", "blocks": 6, "block_size": 2, "window": 0,
    "max_model_len": 1024, "eagle": True, "async_scheduling": True, "hash_block_size": 1,
    "mamba_mode": "align", "mamba_checkpoint": 1, "mamba_shared_prefix": True,
    "ops": [{"op": "arrive", "rid": 11, "tokens": [19, 5]},
            {"op": "schedule", "rid": 11, "chunk": 10000}, {"op": "finish", "rid": 11},
            {"op": "arrive", "rid": 13, "tokens": [19, 5]},
            {"op": "arrive", "rid": 14, "tokens": [19, 5]},
            {"op": "schedule", "rid": 14, "chunk": 2},
            {"op": "schedule", "rid": 13, "chunk": 10000}, {"op": "settle", "rid": 13},
            {"op": "processed", "rid": 13}, {"op": "settle", "rid": 13}]}


def _judge(tokens: int, computed: int, flights: list, output_from: int, rejected: int = 0,
           async_scheduling: bool = True) -> tuple[bool, Counter]:
    """`settle_made` on plain data: a request of `tokens` tokens, `computed` of them computed,
    `flights` its steps in flight, its last allocation or settle at `output_from` tokens."""
    events = Counter()
    judge = SimpleNamespace(trace=SimpleNamespace(async_scheduling=async_scheduling),
                            output_from={1: output_from},
                            count=lambda name, times=1: events.update({name: times}))
    request = SimpleNamespace(tokens=tuple(range(tokens)), computed=computed, flights=flights,
                              in_flight=sum(flights))
    made = align_async.AlignAsync.settle_made(judge, SimpleNamespace(rid=1, rejected=rejected),
                                              request)
    return made, events


def test_a_settle_is_judged_only_as_vllm_makes_one():
    # vLLM's shape: the output's token sampled (3 tokens since the allocation at 2), the next
    # step in flight or none: cached at 2, the tokens but the last
    assert _judge(3, 3, [1], 2) == (True, Counter())
    assert _judge(3, 2, [], 2) == (True, Counter())
    # no output's sample since the allocation: index 2294's first settle (2 tokens, 1 in flight)
    made, events = _judge(2, 2, [1], 2)
    assert not made and events == Counter([align_async.UNMADE_OUTPUT])
    # the token sampled, but a refused allocation left the step it came from in flight: the
    # count cached a token short (the unshrunk 2294's `cache_blocks(r13, 1)` of 3 tokens)
    assert _judge(3, 2, [1], 2)[0] is False
    # drafts rolled back where vLLM makes none: as before (`UNMADE`)
    made, events = _judge(3, 5, [1], 3, rejected=1)
    assert not made and events == Counter([align_async.UNMADE])
    assert _judge(4, 8, [3], 3, rejected=2) == (True, Counter())
    assert _judge(2, 2, [1], 2, async_scheduling=False) == (True, Counter())


@_ENGINE
def test_index_2294s_settles_resolve_to_nothing(monkeypatch):
    """Index 2294's shrunk case agrees with its two settles resolved to nothing, crashes the
    release's `cache_full_blocks` assertion where they apply (the rule as before: settles
    rejecting none always applied), and agrees with the settle vLLM makes in their place (the
    prompt's output sampled, then cached at 2 tokens)."""
    from kvfuzz.fuzz.targets import TARGETS

    target = TARGETS["kvmanager"]
    released, trace = target.catalogue.resolve("vllm.kvmanager"), from_json(SHRUNK_2294)
    outcome = target.check(trace, released)
    assert outcome.divergence is None and outcome.features[align_async.UNMADE_OUTPUT] == 2
    sampled = dict(SHRUNK_2294, ops=SHRUNK_2294["ops"][:9] + [
        {"op": "sample", "rid": 13, "token": 7}, {"op": "settle", "rid": 13}])
    outcome = target.check(from_json(sampled), released)
    assert outcome.divergence is None and outcome.features[align_async.UNMADE_OUTPUT] == 1
    made = align_async.AlignAsync.settle_made
    monkeypatch.setattr(align_async.AlignAsync, "settle_made", lambda self, op, request:
                        made(self, op, request) if op.rejected else True)
    outcome = target.check(trace, released)
    assert outcome.divergence is not None and "AssertionError" in outcome.divergence.report()
    assert "cache_blocks(r13, 2)" in outcome.divergence.report()


def test_the_profile_draws_it_with_tokens_in_flight():
    for index in ASYNC_DRAWN:
        trace = hybrid.MAMBA_ALIGN.generate(0, index)
        assert trace.mamba_shared_prefix and trace.async_scheduling, index
        assert mamba_shared_prefix.applies(trace)
    assert hybrid.MAMBA_ALIGN.generate(0, 265).mamba_speculative  # (drafts in flight too)


@_ENGINE
def test_the_profiles_traces_with_it_and_tokens_in_flight_run_clean():
    from kvfuzz.fuzz.targets import TARGETS

    events = agreeing_features("kvmanager", TARGETS["kvmanager"].catalogue.resolve(
        "vllm.kvmanager"), (hybrid.MAMBA_ALIGN.generate(0, i) for i in ASYNC_DRAWN))
    assert events[align_shared_prefix.CUT] and events[align_shared_prefix.KEYED], events
    assert events[align_async.STEP] and events[align_async.UNMADE_OUTPUT], events


@_ENGINE
def test_the_shared_prefix_checkpoint_under_vllms_async_scheduler_runs_guarded(tmp_path):
    """MAMBA_ASYNC_SHARED_PREFIX (MAMBA_SHARED_PREFIX under the AsyncScheduler): session 0
    guarded clean, the same as unguarded, recorded equal and replaying, the junction's state
    judged keyed with tokens in flight; and every settle vLLM's scheduler made is one the
    reduced mode judges (none resolved to nothing: `settle_made` holds on the engine's own)."""
    from tests.kvmanager.test_guard import clean_and_replaying

    session = clean_and_replaying(0, "MAMBA_ASYNC_SHARED_PREFIX", tmp_path)
    guarded = session.manager.kvfuzz_session
    assert guarded.header.mamba_shared_prefix and guarded.header.async_scheduling
    events = guarded.lock.events
    assert events[align_shared_prefix.KEYED] and events[align_async.STEP], events
    assert not events[align_async.UNMADE_OUTPUT] and not events[align_async.UNMADE], events
