"""The `kvfuzz` script runs under one string hash seed (`fuzz/entry.py`: vLLM's HiSparse
coordinator orders its publications by a `set[str]`, docs/upstream-vllm.md "The hash seed"):
started without PYTHONHASHSEED it starts again in place under 0; a caller's seed stands."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # processes of their own

SHOW = ("from kvfuzz.fuzz.entry import pin_hash_seed; pin_hash_seed(); import os; "
        "print(os.getpid(), os.environ['PYTHONHASHSEED'], hash('r9'))")


def _run(seed: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    out = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stdout.split()


def test_without_a_seed_it_runs_under_seed_0_as_a_caller_setting_0_would():
    _, seed, pinned = _run(None)
    assert seed == "0" and pinned == _run("0")[2]
    assert _run(None)[2] == pinned  # and so the same in the next process


def test_a_callers_seed_stands():
    _, seed, chosen = _run("7")
    assert seed == "7" and chosen == _run("7")[2] and chosen != _run("0")[2]


def test_the_script_is_the_entry_that_pins_it():
    from importlib.metadata import entry_points
    script, = [ep for ep in entry_points(group="console_scripts") if ep.name == "kvfuzz"]
    assert script.value == "kvfuzz.fuzz.entry:command"
