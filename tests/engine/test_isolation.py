"""Hostile implementations (tests/engine/hostile.py) cannot make a run pass, hang, or lose
another finding: each fault is that implementation's reported, saved, replayable divergence, and
the run goes on for the others."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # each test runs kvfuzz as a process of its own
FAULTS = {"segfault": "crashed: SIGSEGV", "aborts": "crashed: SIGABRT",
          "exits": "raised", "exits_hard": "crashed: the process exited with status 0",
          "interrupts": "raised KeyboardInterrupt", "hangs": "timed out after 2 s",
          "resizes": "output buffer changed", "retypes": "output buffer changed"}


def kvfuzz(*args):
    return subprocess.run([sys.executable, "-m", "kvfuzz.fuzz.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_hostile_implementation_diverges_and_the_run_goes_on(fault, tmp_path):
    hostile = f"tests.engine.hostile:{fault}"
    result = kvfuzz("diff", "extend", "--impl", hostile, "--impl", "torch.vectorized",
                    "--cases", 60, "--timeout", 2, "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"DIVERGENCE  extend  implementation {hostile}" in result.stderr
    assert f"what      {FAULTS[fault]}" in result.stderr, result.stderr
    assert fault != "exits" or "actual    SystemExit: 0" in result.stderr
    row = next(line for line in result.stderr.splitlines() if "  torch.vectorized " in line)
    cases, agree, outside = map(int, row.split()[1:4])
    assert cases == 60 == agree + outside and row.split()[-2] == "no", row
    saved = list(tmp_path.iterdir())
    assert len(saved) == 1 and saved[0].name.startswith("extend-")
    again = kvfuzz("replay", saved[0], "--impl", hostile, "--timeout", 2)
    assert again.returncode == 1 and FAULTS[fault] in again.stdout, again.stdout
    if fault == "segfault":  # the saved case is sound: the bundled implementations agree on it
        assert kvfuzz("replay", saved[0]).returncode == 0


def test_a_trace_target_survives_an_allocator_that_ends_the_process(tmp_path):
    hostile = "tests.engine.hostile:ExitsOnMerge"
    result = kvfuzz("diff", "allocator", "--impl", hostile, "--impl", "allocator.torch",
                    "--cases", 20, "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr
    assert "what      crashed: the process exited with status 3" in result.stderr
    assert [p.name[:10] for p in tmp_path.iterdir()] == ["allocator-"]
    row = next(line for line in result.stderr.splitlines() if "  allocator.torch " in line)
    assert row.split()[1:3] == ["20", "20"], row


@pytest.mark.parametrize("target, hostile, expected", [
    ("compaction", "garbage_snapshots", "TypeError: snapshot returned dict"),
    ("allocator", "NestedResults", "expected a 1-D integer tensor")])
def test_results_of_the_wrong_shape_are_the_implementations_fault(target, hostile, expected,
                                                                  tmp_path):
    result = kvfuzz("diff", target, "--impl", f"tests.engine.hostile:{hostile}", "--cases", 20,
                    "--corpus", tmp_path)
    assert result.returncode == 1, result.stderr
    assert "what      crash at op" in result.stderr and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
