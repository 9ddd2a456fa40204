"""The released SGLang `UnifiedRadixCache` (sglang 0.5.23) with each tree core through the lock
step, the released allocator in the loop: every seeded trace runs to its last op on the Rust core
(checked against the Python core beside it too) and on the Python core (fewer traces of its own:
see SHARDS), and reaches what the judge counts; every outcome says which core ran; the Python core
keeping the caller's key is declared, and undeclared, reported; an outside class of the wrong
shape is refused in one line. Skips without SGLang."""

from collections import Counter

import pytest

from kvfuzz.fuzz.unified.host_lockstep import DEMOTED, DROPPED, LOADED, PREFETCHED, RECLAIMED
from kvfuzz.fuzz.unified.lockstep import FULL_DONOR, MAMBA_EVENTS, PYTHON, RUST, SWA_EVENTS
from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.impl.registry import YOURS, Implementation
from kvfuzz.impl.unified import DECLARES, MAMBA_DECLARES, RELEASED, SWA_DECLARES
from kvfuzz.strategies.radix.trace import Evict, Insert, Match
from kvfuzz.strategies.unified.profile import CORES
from kvfuzz.strategies.unified.trace import Trace
from tests.bars import bar
from tests.helpers import (assert_refused_in_one_line, assert_seeded_traces_agree, divergence,
                           needs_engine, undeclared)

pytestmark = needs_engine("sglang")
RUST_ENTRY = UNIFIED.catalogue.resolve("sglang.unified.rust")
PYTHON_ENTRY = UNIFIED.catalogue.resolve("sglang.unified.python")
SWA_RUST = UNIFIED.catalogue.resolve("sglang.unified.swa.rust")
SWA_PYTHON = UNIFIED.catalogue.resolve("sglang.unified.swa.python")
MAMBA_RUST = UNIFIED.catalogue.resolve("sglang.unified.mamba.rust")
MAMBA_PYTHON = UNIFIED.catalogue.resolve("sglang.unified.mamba.python")
DONOR_RUST = UNIFIED.catalogue.resolve("sglang.unified.mamba.donor.rust")
DONOR_PYTHON = UNIFIED.catalogue.resolve("sglang.unified.mamba.donor.python")
HOST_RUST = UNIFIED.catalogue.resolve("sglang.unified.host.rust")
HOST_PYTHON = UNIFIED.catalogue.resolve("sglang.unified.host.python")
HOST_EVENTS = (LOADED, RECLAIMED, DROPPED, DEMOTED, PREFETCHED)


# 2,000 seeded traces with each core (issue 21), in shards of 500 that xdist spreads over CI's
# two workers. The Rust core's shards run the Python core beside it on the same 2,000 traces
# (impl/unified/twin.py) and hold it to the Rust core (fuzz/unified/twin.py): every call's answer
# (a raise by its type), both cores' sizes after every op, and at every whole read (every 8th
# read, where a light read differs, after the last op) the whole public state: nodes by path
# with slots, children and whether locked, the free list in order, the rows, the walk, the KV
# events page by page. The Rust core being held to the oracle, that judges the Python core's
# answers and public state on those 2,000 traces. What the twin leaves out (the reader's
# `compared_only`), and only the Python core's own shards judge, against the oracle: the node
# fields only that core shows (hit counts, priorities, access and creation order, lock counts;
# the Rust core shows none of them), its node digest after every op (the twin: a node-only
# difference that heals before the next whole read is missed), a raise's message, and the
# aliases (no value sharing memory with a node, row or caller tensor). Those run on
# PYTHON_SHARDS x 500 traces of their own (indices after the Rust core's), no longer 2,000: the
# other 1,500 cost some 100 s of CI's CPU for checks the twin makes on 2,000.
# CI runs the first of the Rust core's shards (a quarter: `tests/bars.py`), a nightly run all four.
SHARDS, SHARD, PYTHON_SHARDS = 4, 500, 1
# The first traces of each core's first shard reach every edge class its judge counts.
REACH = 40


@pytest.mark.parametrize("entry, indices, ran, other", [
    (entry, range(start, start + SHARD), ran, other)
    for entry, first, shards, ran, other in (
        (RUST_ENTRY, 0, bar(SHARDS), RUST, PYTHON),
        (PYTHON_ENTRY, SHARDS * SHARD, PYTHON_SHARDS, PYTHON, RUST))
    for start in range(first, first + shards * SHARD, SHARD)],
    ids=[f"{core}-{shard}" for core, shards in (("rust", bar(SHARDS)), ("python", PYTHON_SHARDS))
         for shard in range(shards)])
def test_every_seeded_trace_runs_to_its_last_op_on_each_core_and_says_its_core(
        entry, indices, ran, other):
    assert UNIFIED.catalogue.resolve(RELEASED) is RUST_ENTRY
    events, first = Counter(), Counter()
    for index, found in enumerate(assert_seeded_traces_agree("unified", entry, indices)):
        events.update(found)
        if index < REACH:
            first.update(found)
    assert events[ran] == len(indices) and events[other] == 0
    if indices.start % (SHARDS * SHARD):  # the first shard of each core: the edge classes
        return
    missing = set(UNIFIED.judge.lockstep.EVENTS) - {other} - set(SWA_EVENTS) - \
        set(MAMBA_EVENTS) - {FULL_DONOR} - set(first)
    assert not missing, sorted(missing)


@pytest.mark.parametrize("entry, indices, ran, components, reached", [
    (SWA_RUST, range(0, 12), RUST, "full+swa", SWA_EVENTS),
    (SWA_PYTHON, range(20, 45), PYTHON, "full+swa", SWA_EVENTS),
    (MAMBA_RUST, range(0, 10), RUST, "full+mamba", MAMBA_EVENTS),
    (MAMBA_PYTHON, range(10, 25), PYTHON, "full+mamba", MAMBA_EVENTS),
    (DONOR_RUST, range(0, 3), RUST, "full+mamba", (FULL_DONOR,)),
    (DONOR_PYTHON, range(3, 15), PYTHON, "full+mamba", MAMBA_EVENTS + (FULL_DONOR,)),
    (HOST_RUST, range(0, 8), RUST, "full+host", HOST_EVENTS),
    (HOST_PYTHON, range(8, 20), PYTHON, "full+host", HOST_EVENTS)],
    ids=["swa-rust", "swa-python", "mamba-rust", "mamba-python", "donor-rust", "donor-python",
         "host-rust", "host-python"])
def test_a_components_seeded_traces_run_to_their_last_op_on_each_core_and_reach_its_edges(
        entry, indices, ran, components, reached):
    # The SWA profile: each trace is a "unified-swa/1" trace with its window, on the hybrid
    # allocator; the Mamba profile: "unified-mamba/1" tree ops over a hybrid pool of Mamba
    # states, and on the unified memory pool (the donor entries: a state short of bytes is
    # funded by Full leaves); the host profile: "unified-host/1" tree ops with HiCache's host
    # tier (load-backs, duplicates reclaimed, drops, demotions, prefetches). The Rust core's
    # entry runs the Python core beside it, the component's state (SWA slots and pool; each
    # node's state and the state pool; both host-tier pools in order) compared.
    events = Counter()
    for index in indices:
        trace = UNIFIED.generator.generate(0, index, [entry])
        assert trace.components == components and \
            (trace.window or trace.mamba_slots or trace.host_size) >= 1
        outcome = UNIFIED.check(trace, entry)
        assert outcome.status == "agree", outcome.divergence.report()
        events.update(outcome.features)
    assert events[ran] == len(indices)
    assert set(reached) <= set(events), sorted(set(reached) - set(events))


def test_keeping_the_callers_mamba_value_is_declared_and_undeclared_reported():
    # Both cores keep the caller's Mamba tensor as the node's state (the full value is copied):
    # the entries declare it; without the declaration the harness poisons the tensor after the
    # insert and the state the tree then shows is the poison.
    trace = UNIFIED.generator.generate(0, 0, [MAMBA_PYTHON])
    assert UNIFIED.check(trace, MAMBA_PYTHON).status == "agree"
    double = Implementation("double", "unified", RELEASED, "test double", YOURS,
                            preconditions=tuple(p for p in MAMBA_DECLARES["python"]
                                                if "Mamba value" not in p))
    found = divergence("unified", trace, double)
    assert found is not None and "Mamba slots [-99] outside the pool" in found.report()


def test_the_swa_mutants_reach_only_the_swa_profile():
    # Built with full attention alone (no SWA component declared), the mutated SWA component is
    # never constructed: the full-attention traces agree, and only the SWA profile catches it
    # (tests/unified/test_mutants.py).
    name = "swa_match_ignores_window"
    full = Implementation(name, "unified", f"kvfuzz.impl.unified.upstream_mutants:{name}",
                          "test double", YOURS, preconditions=DECLARES["python"])
    for index in (0, 1):
        trace = UNIFIED.generator.generate(0, index, [full])
        assert trace.components == "full"
        assert UNIFIED.check(trace, full).status == "agree"


def __getattr__(name):  # by import path: tests.unified.test_upstream:Undeclared
    if name == "Undeclared":
        return undeclared(RELEASED)
    raise AttributeError(name)


def test_undeclared_the_python_core_keeping_the_callers_key_is_reported():
    # The entry declares it (`KEEPS_KEY`); a class that asks for the Python core and declares
    # nothing else gets its keys poisoned after each call, and the tree shows the poison.
    python_only = Implementation("Undeclared", "unified", f"{__name__}:Undeclared",
                                 "test double", YOURS, preconditions=(CORES["python"],))
    trace = Trace(1, 8, "lru", False, (Insert((1, 2, 3)), Match((1, 2, 3))))
    assert UNIFIED.check(trace, PYTHON_ENTRY).status == "agree"
    found = divergence("unified", trace, python_only)
    assert found is not None
    report = found.report()
    assert "ownership" in report and "tree core python (UnifiedTreeCore)" in report, report


@pytest.mark.parametrize("attr, shows", [
    ("not_a_class", "is a function, not a class"),
    ("NotACache", "has no method match_prefix, insert, evict"),
])
def test_an_outside_class_of_the_wrong_shape_is_one_line(attr, shows):
    # the radix tests' wrong shapes: nothing in them is the radix cache's
    assert_refused_in_one_line("unified", f"tests.radix.test_upstream:{attr}", shows,
                               "SGLang UnifiedRadixCache's interface")


@pytest.mark.parametrize("name, label, found", [("evict_stops_short", "eviction", 11),
                                                ("unlock_counts_shared_twice",
                                                 "evictable_size", 0)])
def test_the_swa_judge_checks_eviction_and_sizes_itself(name, label, found):
    # The SWA judge keeps no model: full-attention mutants of what it still checks itself (an
    # eviction short of the shortfall, the sizes against the nodes) are caught on SWA traces.
    swa = Implementation(name, "unified", f"kvfuzz.impl.unified.upstream_mutants:{name}",
                         "test double", YOURS, preconditions=SWA_DECLARES["python"])
    outcome = UNIFIED.check(UNIFIED.generator.generate(0, found, [swa]), swa)
    assert outcome.status == "diverge" and outcome.divergence.signature[-1] == label


def test_a_cores_difference_the_last_op_makes_is_caught_at_the_last_op():
    # The twin's whole state is read with every whole read (fuzz/radix/reads.py: every few
    # reads and after the last op); what differs only in it (the free list's order: no call
    # answers it) after the last op is read there, the report naming the ops it covers.
    trace = Trace(1, 3, "lru", False, (Insert((1, 2, 3)), Evict(3)))
    assert UNIFIED.check(trace, RUST_ENTRY).status == "agree"
    found = divergence("unified", trace, "mutant.sglang.unified.evict_frees_reversed")
    report = found and found.report()
    assert found is not None and found.what.startswith("cores differ at op 1 of 2"), report
    assert "free: the Rust core [1, 2, 3], the Python core [3, 2, 1]" in report, report
    assert "may have changed in any op from 0 to 1" in report, report
