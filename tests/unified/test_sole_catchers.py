"""Properties of the prefix-cache contract that the full-attention judges also see through the
radix model (which compares every node's lock count and the pages each eviction takes), each
shown catching a fault that no other check of its judge sees: on the SWA and Mamba profiles,
whose judges keep no model of the tree, the property is all that judges it. Each test runs the
fault on a small trace, finds the property's report, then runs the same judge with that one
check taken out and finds nothing, and the released class agrees. Skips without SGLang."""

import functools

import pytest

from kvfuzz.fuzz.radix import state as radix_state
from kvfuzz.fuzz.unified import mamba_lockstep
from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.impl.registry import YOURS, Implementation
from kvfuzz.impl.unified import MAMBA_DECLARES, SWA_DECLARES
from kvfuzz.oracle.radix import invariants
from kvfuzz.strategies.radix.trace import Admit, Finish, Insert, Match, Pin
from kvfuzz.strategies.unified.trace import Trace
from tests.helpers import divergence, needs_engine

pytestmark = needs_engine("sglang")


def mamba_trace(*ops) -> Trace:
    return Trace(1, 16, "lru", False, ops, components="full+mamba", mamba_slots=4)


def swa_trace(*ops) -> Trace:
    return Trace(1, 32, "lru", False, ops, components="full+swa", window=2)


def assert_only(check, fault, trace: Trace, released: str, shows: str, monkeypatch) -> None:
    """`fault` diverges on `trace` with `shows` in its report; with `check` (module, name) made
    to find nothing, it agrees; the released entry agrees."""
    assert UNIFIED.check(trace, UNIFIED.catalogue.resolve(released)).status == "agree"
    found = divergence("unified", trace, fault)
    assert found is not None and shows in found.report(), found and found.report()
    monkeypatch.setattr(*check, lambda *args, **kwargs: [])
    assert UNIFIED.check(trace, fault).status == "agree"


def test_lock_counts_back_to_baseline_alone_catch_an_unlock_that_keeps_the_path(monkeypatch):
    # The mutant's unlock releases nothing of the full component: the path stays locked and
    # protected, so the sizes agree with the counts and the counts stay monotone.
    mutant = UNIFIED.catalogue.resolve("mutant.sglang.unified.unlock_keeps_full_locks")
    trace = mamba_trace(Insert((1, 2)), Insert((1, 2, 3, 4)), Pin((1, 2, 3, 4)),
                        Match((1, 2, 3, 4)))
    assert_only((radix_state, "pair_violations"), mutant, trace, "sglang.unified.mamba.python",
                "lock baseline: lock counts not back to baseline after a lock/unlock pair: "
                "the page ending [1] had lock 0 before, 1 after (4 pages moved)", monkeypatch)


def test_monotone_lock_counts_alone_catch_a_lock_that_skips_a_node(monkeypatch):
    # The double takes and gives back the same locks (the unlock ends at the baseline) and
    # keeps the sizes with the counts; only the order along the path is wrong while it holds.
    trace = swa_trace(Insert((1, 2)), Insert((1, 2, 3, 4)), Admit(1, (1, 2, 3, 4, 5), 5),
                      Finish(1, False))
    assert_only((invariants, "lock_order_violations"), outside("SkipsParentLock", SWA_DECLARES),
                trace, "sglang.unified.swa.python",
                "lock counts not monotone: node [1 2 3 4] has 1, its parent 0", monkeypatch)


def test_a_state_at_an_inserts_end_alone_catches_a_dropped_state(monkeypatch):
    # The insert of [1 2] splits [1 2 3 4]: its end is the split's upper node, with no state.
    # The double frees the donated state there (the pool stays whole, the answer says no
    # state was there, as none was), and a later match ends where the states are.
    trace = mamba_trace(Insert((1, 2, 3, 4)), Insert((1, 2)), Match((1, 2)))
    assert_only((mamba_lockstep, "insert_problems"), outside("DropsStateAtSplit", MAMBA_DECLARES),
                trace, "sglang.unified.mamba.python",
                "mamba insert: insert((1, 2)) left no Mamba state at its key's end", monkeypatch)


def outside(attr: str, declares: dict) -> Implementation:
    return Implementation(attr, "unified", f"{__name__}:{attr}", "test double", YOURS,
                          preconditions=declares["python"])


def __getattr__(name):  # by import path: tests.unified.test_sole_catchers:SkipsParentLock
    if name in ("SkipsParentLock", "DropsStateAtSplit"):
        return doubles()[name]
    raise AttributeError(name)


@functools.cache
def doubles() -> dict:
    """Components of the released cache with one fault each, wired in where the Python core is
    asked for. Built on first use, never at collection."""
    from kvfuzz.impl.registry import load_attribute
    from kvfuzz.impl.unified.upstream_mutants import where_python_core

    components = "sglang.srt.mem_cache.unified_cache"
    kind = load_attribute(f"{components}.component_type:ComponentType")
    full = load_attribute(f"{components}.components.full:FullComponent")
    mamba = load_attribute(f"{components}.components.mamba:MambaComponent")

    class SkipsParentLock(full):
        """A device lock leaves out the locked node's parent, and its unlock too: the counts
        come back, the sizes follow the counts, and a parent holds fewer than its child."""

        def _skipped(self, node):
            parent = node.parent
            return None if parent is None or parent is self.tree_core.root_node else parent

        def _move(self, node, to_protected: bool) -> int:
            tokens, ct = self.reclaimable_value_len(node), self.component_type
            sign = 1 if to_protected else -1
            self.tree_core.component_evictable_size_[ct] -= sign * tokens
            self.tree_core.component_protected_size_[ct] += sign * tokens
            return tokens

        def acquire_component_lock(self, node, result, lock_host=False):
            result = super().acquire_component_lock(node, result, lock_host)
            parent = None if lock_host else self._skipped(node)
            if parent is not None:
                data = parent.component_data[self.component_type]
                data.lock_ref -= 1
                if data.lock_ref == 0 and data.value is not None:
                    result.delta -= self._move(parent, False)
            return result

        def release_component_lock(self, node, params, lock_host=False):
            parent = None if lock_host else self._skipped(node)
            if parent is not None:
                data = parent.component_data[self.component_type]
                if data.lock_ref == 0 and data.value is not None:
                    self._move(parent, True)
                data.lock_ref += 1
            super().release_component_lock(node, params, lock_host)

    class DropsState(mamba):
        """An insert that ends at a node with no state and is no new leaf (a split's upper
        node, a node whose state was evicted) frees the donated state instead of keeping it."""

        def commit_insert_component_data(self, node, is_new_leaf, params, result,
                                         cache_actions):
            if not is_new_leaf and node.component_data[self.component_type].value is None:
                self._free_mamba_value(params.mamba_value)
                return
            super().commit_insert_component_data(node, is_new_leaf, params, result,
                                                 cache_actions)

    return {"SkipsParentLock": where_python_core(
                "SkipsParentLock", {"component_registry_override": {kind.FULL: SkipsParentLock}},
                SkipsParentLock.__doc__),
            "DropsStateAtSplit": where_python_core(
                "DropsStateAtSplit", {"component_registry_override": {kind.MAMBA: DropsState}},
                DropsState.__doc__)}
