"""The "async connector" profile (`strategies/kvmanager/async_connector.py`): a KV connector under
vLLM's asynchronous scheduler, traces shaped as the guarded `ASYNC_CONNECTOR` sessions, so the
connector's ops beside the asynchronous ones, and frees deferred while a step is in flight,
come from kvfuzz's own generator. The released class runs its traces clean
(`test_every_profile.py`); here: the traces are the scheduler's shape (no vLLM needed), and
catalogue mutants of the connector, the deferred frees and the tokens in flight are caught on
the profile's first traces at the op that reaches them (slow: vLLM)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from kvfuzz.fuzz.kvmanager.connector import ConnectorOps
from kvfuzz.strategies.kvmanager import async_connector, async_outputs, connector
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded
from kvfuzz.strategies.kvmanager.trace import (Arrive, Finish, Placeholder, Preempt, Release,
                                               RemoveSkipped, Settle)
from tests.helpers import divergence, with_engine

KINDS = ("asynchronous load", "synchronous load", "load done", "load failed, a prefix valid",
         "load failed, nothing valid", "deferred finish", "release", "placeholder", "settle",
         "preempt", "synchronous load failed")


def _made(traces) -> Counter:
    made = Counter()
    for trace in traces:
        synced = set()
        for op in trace.ops:
            if isinstance(op, Connect):
                made["asynchronous load" if op.load else "synchronous load"] += 1
                synced.discard(op.rid)
                if not op.load:
                    synced.add(op.rid)
            elif isinstance(op, Loaded) and op.rid in synced:
                made["synchronous load failed"] += 1
                synced.discard(op.rid)
            elif isinstance(op, Loaded):
                made["load done" if op.valid < 0 else "load failed, nothing valid"
                     if op.valid == 0 else "load failed, a prefix valid"] += 1
            elif isinstance(op, Finish) and op.defer:
                made["deferred finish"] += 1
            elif isinstance(op, (Release, Placeholder, Settle, Preempt)):
                made[type(op).__name__.lower()] += 1
    return made


def _shape_problems(trace) -> list[str]:
    """What the asynchronous scheduler with a consumer connector never makes: a release with no
    deferred free pending, a deferred free never released, a finish not preceded by the
    connector's `remove_skipped`, a load reported for a request with none in flight (an
    asynchronous load's, or a synchronous one's failure: since 2026-12-06)."""
    problems, pending, loading, synced = [], Counter(), set(), set()
    for index, op in enumerate(trace.ops):
        previous = trace.ops[index - 1] if index else None
        if isinstance(op, Connect):
            loading.discard(op.rid)
            synced.discard(op.rid)
            (loading if op.load else synced).add(op.rid)
        elif isinstance(op, Loaded):
            if op.rid not in loading and not (op.rid in synced and op.valid >= 0):
                problems.append(f"op {index}: r{op.rid}'s load reported, none in flight")
            loading.discard(op.rid)
            synced.discard(op.rid)
        elif isinstance(op, Finish):
            loading.discard(op.rid)
            if not (isinstance(previous, RemoveSkipped) and previous.rid == op.rid):
                problems.append(f"op {index}: r{op.rid} finished without remove_skipped first")
            pending[op.rid] += op.defer
        elif isinstance(op, Release):
            if not pending[op.rid]:
                problems.append(f"op {index}: r{op.rid} released, no deferred free pending")
            pending[op.rid] -= 1
    if trace.ops and len(trace.ops) < 200:  # a trace that ended with its requests
        problems += [f"r{rid}'s deferred free never released" for rid in +pending]
    return problems


def test_the_profiles_traces_make_the_connectors_ops_under_the_asynchronous_scheduler():
    traces = [async_connector.GENERATOR.generate(0, index) for index in range(40)]
    assert all(t.async_scheduling and t.note == "profile async connector" for t in traces)
    made = _made(traces)
    assert all(made[kind] for kind in KINDS), made
    assert [p for t in traces for p in _shape_problems(t)] == []


def test_the_checks_fail_on_traces_not_of_that_shape():
    """The checks above can fail: the "async outputs" profile makes no connector op and no
    deferred free; a release moved ahead of its deferred finish, or a finish without its
    `remove_skipped`, is not the scheduler's shape."""
    plain = [async_outputs.GENERATOR.generate(0, index) for index in range(40)]
    assert not any(_made(plain)[kind] for kind in KINDS[:7])
    trace = next(t for t in (async_connector.GENERATOR.generate(0, index) for index in
                             range(40)) if _made([t])["release"])
    ops = list(trace.ops)
    release = next(i for i, op in enumerate(ops) if isinstance(op, Release))
    deferred = max(i for i, op in enumerate(ops[:release])
                   if isinstance(op, Finish) and op.rid == ops[release].rid)
    moved = ops[:deferred - 1] + [ops[release]] + ops[deferred - 1:release] + ops[release + 1:]
    assert _shape_problems(type(trace)(**{**vars(trace), "ops": tuple(moved)}))
    dropped = [op for i, op in enumerate(ops) if i != deferred - 1]
    assert _shape_problems(type(trace)(**{**vars(trace), "ops": tuple(dropped)}))


def _in_flight_victims(can_preempt=None, count: int = 60) -> list[tuple[int, int]]:
    """(trace index, rid) of every preemption of a request with a step in flight that the
    generator made in its first `count` traces (`can_preempt` replacing its rule)."""
    victims = []

    class Spy(async_connector._AsyncConnected):
        def _preempt(self, request):
            if self._in_flight(request):
                victims.append((self.index, request.rid))
            super()._preempt(request)

    if can_preempt is not None:
        Spy._can_preempt = can_preempt
    for index in range(count):
        rng = random.Random(index)
        Spy.index = index
        spy = Spy(rng, 2, 4, rng.randint(6, 10), 4, 1024, True, False)
        while len(spy.ops) < 200 and spy.step():
            pass
    return victims


def test_no_request_with_a_step_in_flight_is_preempted():
    """vLLM sets `defer_block_free` with a consumer connector under overlapping batches and
    then never preempts such a request (`_request_blocks_can_be_freed`); the generator neither.
    The check can fail: with the rule off, some preemptions are of such requests."""
    assert _in_flight_victims() == []
    assert _in_flight_victims(lambda self, request: True)


# Catalogue mutants the profile's traces reach, each caught on its trace `index` (which the
# released class runs clean) at the op named: the asynchronous load's admission (its blocks
# cached before the load, a null block for external tokens, the reserved blocks ignored, the
# connector's hit diverged, loaded blocks zeroed), a deferred free (its blocks returned in
# order, or one group's only), the connector's `remove_skipped` before a finish, and the tokens
# in flight at an output placeholder's slot.
AT_OP = [("delayed_load_cached", 0, "estimate_cached_tokens", "asynchronously"),
         ("external_on_null_block", 0, "invariant", "asynchronously"),
         ("connector_hit_diverged", 0, "prefix hit", "asynchronously"),
         ("loaded_blocks_zeroed", 0, "zeroing", "asynchronously"),
         ("reserved_blocks_ignored", 1, "None vs success", "blocks reserved"),
         ("partial_load_skips_all_zeroing", 5, "zeroing", "writing groups"),
         ("deferred_free_reversed", 0, "deferred free", "its free deferred"),
         ("deferred_free_first_group_only", 0, "deferred free", "its free deferred"),
         ("finished_window_kept", 1, "block table", "before a connector's request_finished"),
         ("in_flight_ignored", 1, "invariant", "the slot of the token its step in flight"),
         ("window_moves_early", 1, "invariant", "the slot of the token its step in flight")]


@with_engine("vllm")
@pytest.mark.parametrize("name, index, label, where", AT_OP)
def test_a_mutant_the_profile_reaches_is_caught_there(name, index, label, where):
    trace = async_connector.GENERATOR.generate(0, index)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, f"mutant.vllm.kvmanager.{name}")
    assert found is not None and found.what.startswith(label) and where in found.what, \
        found and found.report()


# -- a prompt of one token loaded whole (since 2026-12-06) -------------------------------------
def _reloads(trace) -> list[tuple[int, bool]]:
    """(op index, load) of each `connect` of a one-token prompt after its load was reported:
    the scheduler's lookup again, with the blocks of its whole load held."""
    single, reported, found = set(), set(), []
    for index, op in enumerate(trace.ops):
        if isinstance(op, Arrive) and len(op.tokens) == 1:
            single.add(op.rid)
        elif isinstance(op, Loaded) and op.rid in single:
            reported.add(op.rid)
        elif isinstance(op, Connect) and op.rid in reported:
            found.append((index, op.load))
    return found


def test_one_token_prompts_go_through_the_connector_and_are_admitted_through_it_again():
    """Both connector profiles load prompts of one token (async connector: half of their
    admissions through the connector; before, never) and admit them through the connector
    again after the load (asynchronously again in some), with draws of their own: a trace
    without one keeps its ops."""
    for stream in (async_connector.GENERATOR, connector.GENERATOR):
        reloads = [r for index in range(60) for r in _reloads(stream.generate(0, index))]
        assert any(load for _, load in reloads) and len(reloads) >= 2, (stream, reloads)


@with_engine("vllm")
def test_the_lookup_again_with_the_loaded_blocks_held_is_judged_as_released():
    """The "connector" profile's trace 56 admits its r13 (one token, block size 1) through the
    connector again after its whole load, asynchronously: vLLM's coordinator treats it as
    running (no hit adopted, no block for the external token: it keeps the one its load
    cached). The judge agrees with the release there; a lock step that takes the kept block as
    the new load's own (as it did before) reports it cached before the load."""
    trace = connector.GENERATOR.generate(0, 56)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    kept = ConnectorOps.relooked
    try:
        ConnectorOps.relooked = lambda self, request, rid: [0] * len(
            kept(self, request, rid))
        found = divergence("kvmanager", trace, "vllm.kvmanager")
    finally:
        ConnectorOps.relooked = kept
    assert found is not None and found.what.startswith("cached before the load") and \
        "r13 admitted with up to 1 external tokens, asynchronously" in found.what, \
        found and found.report()
