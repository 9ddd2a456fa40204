"""Which tree cores the installed SGLang registers (quick, fake registry modules): a release
whose registry names no "rust" backend (0.5.17, 0.5.18) makes the Rust entries one line
(`impl/unified/backend.py:rust_core_absent`); one that names it, or has no registry, says
nothing here. And a trace of no ops (a shrinker's candidate) reads its end state with no core
read before it (`UnifiedLockstep.whole_args`)."""

from __future__ import annotations

import sys
from types import ModuleType

from kvfuzz.fuzz.unified.lockstep import UnifiedLockstep
from kvfuzz.impl.unified.backend import REGISTRY, rust_core_absent


def registry_with(monkeypatch, *names):
    module = ModuleType(REGISTRY)
    module.registered_tree_core_backends = lambda: list(names)
    monkeypatch.setitem(sys.modules, REGISTRY, module)


def test_a_registry_without_rust_is_named(monkeypatch):
    registry_with(monkeypatch, "python")
    assert rust_core_absent() == ("its tree core registry has no 'rust' backend (registered: "
                                  "python; the .python entries run its core)")


def test_a_registry_with_rust_says_nothing(monkeypatch):
    registry_with(monkeypatch, "python", "rust")
    assert rust_core_absent() is None


def test_no_registry_says_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, REGISTRY, None)  # import raises ImportError
    assert rust_core_absent() is None


def test_the_end_state_of_a_trace_of_no_ops_asks_no_twin():
    lock = object.__new__(UnifiedLockstep)  # no op ran: the core was never read
    assert lock.whole_args() == ()
    lock.core = {"twin": "rust", "rust": True}
    assert lock.whole_args() == (True,)
