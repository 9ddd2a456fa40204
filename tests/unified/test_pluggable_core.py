"""SGLang 0.5.17 and 0.5.18's pluggable tree core, read by the unified driver (quick, fakes):
the cache keeps no name of the core it built (`_tree_core_backend` came in 0.5.19), so which
core runs is the environment's name, as those releases build it (`UnifiedDriver.core`, 005fb44);
a cache that keeps the name is read as it says. Each read beside the broken variant it catches.
The request's lock fields of 0.5.17-0.5.19: tests/unified/test_legacy.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kvfuzz.impl.unified.backend import BACKEND_VARIABLE


class UnifiedTreeCore:  # the Python core's class name, as a release builds it
    pass


def driver_with(cache):
    return SimpleNamespace(own_nodes=None, cache=cache, asked="python", params=None)


def test_the_core_of_a_cache_that_keeps_no_name_is_the_environments(monkeypatch):
    from kvfuzz.impl.unified.driver import UnifiedDriver  # torch, no SGLang

    monkeypatch.setenv(BACKEND_VARIABLE, "kvfuzz-mutant-lock_leaf_twice")
    old = SimpleNamespace(tree_core=UnifiedTreeCore())  # 0.5.17, 0.5.18: no _tree_core_backend
    core = UnifiedDriver.core(driver_with(old))
    assert core["backend"] == "kvfuzz-mutant-lock_leaf_twice" and not core["rust"]
    assert core["built"].endswith(".UnifiedTreeCore") and core["fallback"] is None
    monkeypatch.delenv(BACKEND_VARIABLE)
    assert UnifiedDriver.core(driver_with(old))["backend"] == "python"  # the registry's default
    # 0.5.19 on: the name the cache keeps, whatever the environment says
    monkeypatch.setenv(BACKEND_VARIABLE, "rust")
    kept = SimpleNamespace(tree_core=UnifiedTreeCore(), _tree_core_backend="python")
    assert UnifiedDriver.core(driver_with(kept))["backend"] == "python"

    class NameKept(UnifiedDriver):  # broken: the read as it was, on every release
        def core(self):
            return {"backend": str(self.cache._tree_core_backend)}

    with pytest.raises(AttributeError, match="_tree_core_backend"):  # the 0.5.17 cells' crash
        NameKept.core(driver_with(old))


class Switch:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


def test_0_5_17s_checkpoint_keeps_the_window_read_from_its_switch_and_told_to_the_judge(
        monkeypatch):
    import sys
    from collections import Counter

    from kvfuzz.fuzz.unified.swa_lockstep import Held as Running
    from kvfuzz.fuzz.unified.swa_lockstep import SWALockstep
    from kvfuzz.fuzz.unified.target import UNIFIED
    from kvfuzz.impl.unified.release_window import (ENVIRON, WINDOW_FREE_SWITCH,
                                                    checkpoint_frees_window)
    from kvfuzz.oracle.radix.contract import KEEPS_WINDOW_AT_CHECKPOINT, Contract
    from tests.unified.test_legacy import Unified0521

    def environ(value):
        envs = SimpleNamespace(**{WINDOW_FREE_SWITCH: Switch(value)})
        monkeypatch.setitem(sys.modules, ENVIRON, SimpleNamespace(envs=envs))

    def swa_entry():
        entry = UNIFIED.catalogue.resolve("sglang.unified.swa.python")
        return UNIFIED.catalogue.declare(entry, Unified0521)

    environ(False)  # 0.5.17's default
    assert not checkpoint_frees_window()
    contract = UNIFIED.judge.options(swa_entry())["contract"]
    assert KEEPS_WINDOW_AT_CHECKPOINT in swa_entry().preconditions and not contract.frees_window
    environ(True)  # 0.5.18 on (or 0.5.17 with the switch set)
    assert checkpoint_frees_window() and KEEPS_WINDOW_AT_CHECKPOINT not in \
        swa_entry().preconditions
    monkeypatch.setitem(sys.modules, ENVIRON, SimpleNamespace())  # no switch: it frees
    assert checkpoint_frees_window()

    def expected_cursor(judge_class, contract):
        """The cursor the judge expects after a chunk of 13 tokens, window 4, cursor 0."""
        judge = object.__new__(judge_class)
        judge.options, judge.events = {"contract": contract}, Counter()
        judge.model = judge.build_model(SimpleNamespace(page_size=1, window=4))
        judge.snap = {"swa": {"requests": {3: (4, 0, 13, [], None)}}}
        next(judge._checkpoint(3, Running((1,) * 13, 13, 0, filled=13)))
        return judge.cursor[2]

    class AlwaysFrees(SWALockstep):  # broken: the judge as it was, the window freed regardless
        def build_model(self, trace):
            model = super().build_model(trace)
            self.contract = Contract(legacy=True)
            return model

    keeps = Contract(legacy=True, frees_window=False)
    assert expected_cursor(SWALockstep, keeps) == 0  # 0.5.17: nothing freed, the cursor stays
    assert expected_cursor(SWALockstep, Contract(legacy=True)) == 8
    assert expected_cursor(AlwaysFrees, keeps) == 8  # the 0.5.17 cells' 'swa cursor' divergence
