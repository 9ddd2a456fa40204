"""The suite's own fixtures (`tests/conftest.py`)."""

from __future__ import annotations

import os

from tests.conftest import SGLANG_SWITCHES, environ_restored


def test_a_switch_set_in_a_test_is_gone_after_it(monkeypatch):
    """What the SWA driver leaves set (SGLANG_INVARIANT_CHECK, for its life) does not reach the
    next test's subprocesses: set inside, unset after; one set before comes back as it was."""
    monkeypatch.delenv("SGLANG_INVARIANT_CHECK", raising=False)
    monkeypatch.setenv("SGLANG_DEBUG_MEMORY_POOL", "0")
    with environ_restored(SGLANG_SWITCHES):
        os.environ["SGLANG_INVARIANT_CHECK"] = "2"
        os.environ["SGLANG_DEBUG_MEMORY_POOL"] = "1"
    assert "SGLANG_INVARIANT_CHECK" not in os.environ
    assert os.environ["SGLANG_DEBUG_MEMORY_POOL"] == "0"


def test_the_switches_are_those_kvfuzz_sets():
    """Every switch a driver sets for its life is in the restored list (the SWA driver's)."""
    from kvfuzz.impl.swa.checks import DEBUG_ENV, INVARIANT_ENV

    assert {INVARIANT_ENV, DEBUG_ENV} <= set(SGLANG_SWITCHES)
