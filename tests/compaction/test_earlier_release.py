"""`MultiEndedAllocator` as SGLang 0.5.15-0.5.19 shipped it, through the same adapter
(impl/compaction/upstream.py): the class is found where those releases kept it
(`mem_cache/multi_ended_allocator.py`, `released.UPSTREAM_POOLS`), and their interface lacks the
public urgent flush (`flush_for_allocation` is 0.5.20's), so the adapter runs the pass those
releases ran themselves, `_flush(urgent=True)`. Quick tests use a stand-in: today's class
without that method. The releases themselves: the slow test at the bottom
(docs/release-history.md)."""

from __future__ import annotations

import pytest

from kvfuzz.fuzz.compaction.target import COMPACTION
from kvfuzz.fuzz.engine.target import AGREE
from kvfuzz.impl.compaction.released import UPSTREAM_POOLS
from kvfuzz.strategies.compaction.trace import Params
from tests.compaction.sides import run_trace
from tests.conftest import CORPUS
from tests.helpers import fail_with, needs_engine
from tests.radix import release_batch

pytestmark = needs_engine("sglang")

N = CORPUS / "history" / "sglang-0.5.22" / "compaction-f230049eabf30eaa.json"
G_PENDING = CORPUS / "history" / "sglang-0.5.21" / "compaction-1f554ee7d06ac2a3.json"
N_EAGER = CORPUS / "history" / "sglang-0.5.17" / "compaction-081ba77616b7eb54.json"
B_GROUP = CORPUS / "history" / "sglang-0.5.17" / "compaction-dea75cd868d8b3bf.json"


class OldInterface:
    """A pool as 0.5.15-0.5.19 show it to the adapter: every attribute of today's class but
    `flush_for_allocation` (today's class still calls it itself, from `_relieve_for_alloc`,
    so the stand-in hides it from the adapter alone)."""

    def __init__(self, pool):
        object.__setattr__(self, "_pool", pool)

    def __getattr__(self, name):
        if name == "flush_for_allocation":
            raise AttributeError(name)  # not there, as before 0.5.20
        return getattr(self._pool, name)

    def __setattr__(self, name, value):
        setattr(self._pool, name, value)

    def bind_peer(self, peer) -> None:  # the pools see each other as they are
        self._pool.bind_peer(peer._pool)


def release_0517():
    """What the adapter constructs: today's class behind `OldInterface`, counting the urgent
    passes it runs (to show which call the adapter made). It keeps today's hole policy, read
    from the class as the adapter reads it (`hole_take`)."""
    from kvfuzz.impl.compaction.upstream import MultiEndedAllocator

    class Counted(MultiEndedAllocator):
        urgent_passes = 0

        def _flush(self, *, urgent: bool) -> int:
            type(self).urgent_passes += urgent
            return super()._flush(urgent=urgent)

    def construct(**kwargs):
        return OldInterface(Counted(**kwargs))

    construct._take_free_pages_from_end = Counted._take_free_pages_from_end
    construct.counted = Counted
    return construct


def adapter(allocator_class, lazy: bool = True):
    from kvfuzz.impl.compaction.upstream import UpstreamCompaction

    def factory(params, device="cpu"):
        return UpstreamCompaction(params, lazy, device, allocator_class)
    return factory


def test_the_class_is_looked_for_where_each_release_kept_it():
    assert UPSTREAM_POOLS == (
        "sglang.srt.mem_cache.allocator.unified_sub_pool:MultiEndedAllocator",  # 0.5.20 on
        "sglang.srt.mem_cache.multi_ended_allocator:MultiEndedAllocator")  # 0.5.15-0.5.19


@pytest.mark.parametrize("lazy", [True, False])
def test_a_release_without_the_public_urgent_flush_agrees_through_its_own(lazy):
    stand_in = release_0517()
    for index in range(6):
        found = run_trace(COMPACTION.generator.generate(0, index), adapter(stand_in, lazy))
        assert found is None, (index, found)
    # the urgent flushes of the traces ran `_flush` itself
    assert stand_in.counted.urgent_passes > 0


def test_the_urgent_flush_mapped_onto_the_non_urgent_one_is_caught(monkeypatch):
    # The broken mapping: where `flush_for_allocation` is missing, take `flush_opportunistic`
    # (capped, and stopped by an in-flight write) for the urgent pass.
    from kvfuzz.impl.compaction import upstream

    monkeypatch.setattr(upstream, "urgent_flush", lambda pool: pool.flush_opportunistic)
    found = next((f for f in (run_trace(COMPACTION.generator.generate(0, i),
                                        adapter(release_0517())) for i in range(30)) if f),
                 None)
    assert found is not None, "30 traces and no urgent flush that the non-urgent one differs on"


def test_the_eager_pass_without_the_fresh_page_check_runs_ns_eager_trace_clean():
    # N in eager mode (0.5.15-0.5.22): a free compacts, and the page it vacated is handed out
    # again with its rows. The mutant that hands pages out unzeroed shows it; the eager entry
    # without the fresh-page check runs the same trace clean on it and agrees on 0.5.23.
    import json

    from kvfuzz.impl.compaction import upstream, upstream_mutants

    trace = COMPACTION.codec.from_json(json.loads(N_EAGER.read_text()))
    unzeroed = upstream_mutants.__getattr__("pages_not_zeroed").args[1]
    found = run_trace(trace, adapter(unzeroed, lazy=False))
    assert found and any("fresh page" in problem or "reads" in problem for problem in found)

    def without_check(params, device="cpu"):
        return upstream.UpstreamCompaction(params, False, device, unzeroed, zeroes=False)
    assert run_trace(trace, without_check) is None
    for name in ("sglang.compaction.eager", "sglang.compaction.eager.unzeroed"):
        outcome = COMPACTION.check(trace, COMPACTION.catalogue.resolve(name))
        if outcome.status != AGREE:
            fail_with(outcome.divergence)


def test_params_of_a_single_ended_pool_build_on_the_stand_in():
    params = Params(total_bytes=214, epp_up=6, epp_down=4, sink_bytes=6, two_ended=False,
                    move_cap=4)
    side = adapter(release_0517())(params)
    vids = side.alloc("up", 3)
    side.free("up", vids[:1])
    assert side.flush("up", urgent=True) == 1  # the top page moved into the hole, uncapped


# The releases themselves, each first on the path of a `kvfuzz` process as a user runs one,
# installed from kvfuzz's wheel cache or the registry (skipped, and said, without either):
# 0.5.17's four replays and 0.5.14's refusal, each in the one process a run that runs every
# file's commands on that release (tests/radix/release_batch.py: the release imported once).
REPLAYS_0_5_17 = release_batch.on(
    "0.5.17",
    ("replay", G_PENDING, "--impl", "sglang.compaction.lazy.unzeroed"),
    ("replay", N_EAGER, "--impl", "sglang.compaction.eager"),
    ("replay", N_EAGER, "--impl", "sglang.compaction.eager.unzeroed"),
    ("replay", B_GROUP, "--impl", "sglang.compaction.eager.unzeroed"))
NONE_0_5_14 = release_batch.on("0.5.14", ("diff", "compaction", "--impl",
                                          "sglang.compaction.lazy", "--cases", "1"))


def test_0_5_17s_class_runs_and_its_findings_diverge_there_and_0_5_14_says_why_not(
        tmp_path_factory):
    pending, fresh, behind, kept = REPLAYS_0_5_17.results(tmp_path_factory)
    assert pending.returncode == 1, pending.stdout[-2000:] + pending.stderr[-2000:]
    assert "field pending at op 4 of 5" in pending.stdout
    assert fresh.returncode == 1 and "fresh page at op 2 of 3" in fresh.stdout, fresh.stdout
    assert behind.returncode == 0, behind.stdout[-2000:] + behind.stderr[-2000:]
    # B: a free inside a free group kept the caller's tensor (fixed in 0.5.18)
    assert kept.returncode == 1 and "expected [5], actual [-99]" in kept.stdout, kept.stdout
    none, = NONE_0_5_14.results(tmp_path_factory)
    assert none.returncode == 2
    assert ("not supported: sglang 0.5.14 has no module sglang.srt.mem_cache.allocator."
            "unified_sub_pool, nor sglang.srt.mem_cache.multi_ended_allocator") in none.stderr
