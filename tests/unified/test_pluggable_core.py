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

