"""The unified judge's light reads (`impl/unified/reader.py:light`: sizes, rows, events, digests
of the KV-canary walk, of the unlocked slots and of the nodes) between whole ones: a cache that
writes where the op it was called for does not reach (another request's row, the allocator, a
node's lock count or shape) is caught, at the op of the write where the light read shows it,
else at the next whole read, which says which ops it covers; and a pin or eviction after a light
read, which takes the model's nodes for the core's before the op, is never blamed for what an
earlier op did (issue 21). Test doubles of the released `UnifiedRadixCache`, on each core; skips
without SGLang."""

import functools
import json
from array import array
from pathlib import Path

import pytest

from kvfuzz.fuzz.radix.lockstep import RadixLockstep
from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.impl.registry import YOURS, Implementation, load_attribute
from kvfuzz.impl.unified import DECLARES, RELEASED
from kvfuzz.fuzz.unified.lockstep import UnifiedLockstep
from kvfuzz.strategies.radix.trace import Pin
from kvfuzz.strategies.unified.codec import from_json
from kvfuzz.strategies.unified.trace import Trace
from tests.helpers import divergence, needs_engine
from tests.radix.test_light_reads import TRACE as RADIX_TRACE, WRITE_AT, WritesOnThirdMiss

pytestmark = needs_engine("sglang")

# tests/radix/test_light_reads.py's ops on a unified cache: r1 holds [1 2 3 4] (slots 1-4),
# [7 8] holds slots 5-6; the third miss, op 6, is a light read, where each double writes.
TRACE = Trace(1, 32, "lru", False, RADIX_TRACE.ops)
# The same with a pin of r1's [1 2] at op 7, a whole read whose lock check takes the model's
# nodes after op 6's light read for the core's.
PINNED = Trace(1, 32, "lru", False, RADIX_TRACE.ops[:WRITE_AT + 1] + (Pin((1, 2)),) +
               RADIX_TRACE.ops[WRITE_AT + 1:])
# CI run 10's fuzz smoke: a false "lock baseline" on the Rust entry with light reads (issue 21)
CI_TRACE = Path(__file__).parents[2] / "corpus" / "unified-0921415beb6ed09a.json"


def __getattr__(name):  # by import path: tests.unified.test_light_reads:OtherRow, ...
    # a class's name only (a double's): pytest's collection probes a module's attributes
    # (`pytest_plugins`, `setUpModule`, ...), and building the doubles imports SGLang
    if name[:1].isupper() and name in doubles():
        return doubles()[name]
    raise AttributeError(name)


@functools.cache
def doubles() -> dict:
    UnifiedRadixCache = load_attribute(RELEASED)
    import torch

    class Hostile(WritesOnThirdMiss, UnifiedRadixCache):
        pass

    class OtherRow(Hostile):
        def write(self):
            self.req_to_token_pool.req_to_token[1:, 0] += 1

    class PoolCount(Hostile):
        def write(self):  # slot 5, the cached [7 8]'s first, handed back
            self.token_to_kv_pool_allocator.free(torch.tensor([5]))

    class PoolSwap(Hostile):
        def write(self):  # slot 5 in place of a free one: the count stays
            self.token_to_kv_pool_allocator.free_pages[0] = 5

    class LockTwice(Hostile):
        """One more lock on r1's node [1 2 3 4], which stays locked: the walk and the unlocked
        slots stay as they were (the Python core's node objects: `node_by_id`)."""

        def write(self):
            root = self.tree_core.root_node
            node = next(n for n in root.children.values() if list(n.key) == [1, 2, 3, 4])
            node.component_data[0].lock_ref += 1  # ComponentType.FULL

    class SplitOffPath(Hostile):
        """Matches [7] behind the caller's back, which splits the cached [7 8] in two: the
        walk, the slots and the locks stay as they were."""

        def match_prefix(self, params):
            self.last = params
            return super().match_prefix(params)

        def write(self):
            key = self.last.key
            self.match_prefix(type(self.last)(key=type(key)(array("q", [7]), key.extra_key)))

    return {"OtherRow": OtherRow, "PoolCount": PoolCount, "PoolSwap": PoolSwap,
            "LockTwice": LockTwice, "SplitOffPath": SplitOffPath}


def double(attr: str, core: str) -> Implementation:
    return Implementation(attr, "unified", f"{__name__}:{attr}", "test double", YOURS,
                          preconditions=DECLARES[core])


@pytest.mark.parametrize("core", ["rust", "python"])
def test_the_released_cache_agrees_on_the_trace(core):
    assert UNIFIED.check(TRACE, UNIFIED.catalogue.resolve(f"sglang.unified.{core}")).status == \
        "agree"


@pytest.mark.parametrize("core", ["rust", "python"])
@pytest.mark.parametrize("attr, label, shows", [
    ("OtherRow", "row", "r1's row: expected [1, 2, 3, 4], actual [2, 2, 3, 4]"),
    ("PoolCount", "allocator", "1 pages both in the tree and on the free list"),
])
def test_a_write_the_light_read_shows_is_caught_at_its_op(core, attr, label, shows):
    found = divergence("unified", TRACE, double(attr, core))
    assert found is not None and found.what.startswith(f"{label} at op {WRITE_AT} "), \
        found and found.report()
    report = found.report()
    assert shows in report and "whole read" not in report, report


@pytest.mark.parametrize("core", ["rust", "python"])
def test_a_write_only_the_whole_read_shows_is_caught_there_saying_which_ops(core):
    found = divergence("unified", TRACE, double("PoolSwap", core))
    whole = RadixLockstep.FULL_EVERY - 1
    assert found is not None and found.what.startswith(f"allocator at op {whole} "), \
        found and found.report()
    report = found.report()
    assert "1 pages both in the tree and on the free list" in report, report
    assert f"may have changed in any op from 0 to {whole}" in report, report


@pytest.mark.parametrize("core", ["rust", "python"])
def test_the_ci_trace_agrees_on_both_entries_with_light_reads(core):
    # (the read before the first op, of an empty tree, took the Rust core for one that shows
    # its nodes' lock counts: the judge then held the model's lock 2 for the Rust core's 1)
    assert UnifiedLockstep.LIGHT
    trace = from_json(json.loads(CI_TRACE.read_text()))
    result = UNIFIED.check(trace, UNIFIED.catalogue.resolve(f"sglang.unified.{core}"))
    assert result.status == "agree", result.divergence and result.divergence.report()


@pytest.mark.parametrize("core", ["rust", "python"])
def test_the_released_cache_agrees_on_the_pinned_trace(core):
    assert UNIFIED.check(PINNED, UNIFIED.catalogue.resolve(f"sglang.unified.{core}")).status \
        == "agree"


def test_a_lock_count_the_walk_does_not_show_is_caught_at_its_op_not_at_the_next_pin():
    found = divergence("unified", PINNED, double("LockTwice", "python"))
    assert found is not None and found.what.startswith(f"tree at op {WRITE_AT} "), \
        found and found.report()
    report = found.report()
    assert "node [1 2 3 4]: lock expected 1, actual 2" in report, report
    assert "lock baseline" not in report and "whole read" not in report, report


@pytest.mark.parametrize("core", ["rust", "python"])
def test_a_split_the_walk_does_not_show_is_caught_at_its_op(core):
    found = divergence("unified", TRACE, double("SplitOffPath", core))
    assert found is not None and found.what.startswith(f"tree at op {WRITE_AT} "), \
        found and found.report()
    report = found.report()
    assert "extra node [7]" in report and "whole read" not in report, report
