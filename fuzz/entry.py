"""The `kvfuzz` console script: one hash seed for every run, then the command (`cli/main.py`).

An implementation's choices may follow the order of a set of strings, which Python's
per-process hash seed shuffles: vLLM 0.33.0's HiSparse coordinator publishes the requests whose
write-backs completed in the order of a `set[str]` (docs/upstream-vllm.md, "The hash seed"). Run
under two seeds, one seeded trace then takes other blocks and counts other edge classes, and a
case found in one run might not replay in the next. So the script starts again in place (the
same process id) under PYTHONHASHSEED=0 unless the caller chose a seed, before the command's
imports (0.8 s of them, not paid twice); the workers it forks inherit it."""

from __future__ import annotations

import os
import sys


def command() -> int:
    pin_hash_seed()
    from kvfuzz.fuzz.cli.main import command as run_command
    return run_command()


def pin_hash_seed() -> None:
    if os.environ.get("PYTHONHASHSEED") is None and getattr(sys, "orig_argv", None):
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
