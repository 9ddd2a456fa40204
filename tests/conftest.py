"""Hypothesis profiles chosen by HYPOTHESIS_PROFILE (dev by default), and shared fixtures."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from kvfuzz.impl.triton_env import use_interpreter_without_cuda

# Before any test module imports triton (sglang's allocator does, at collection): without CUDA,
# TRITON_INTERPRET=1 then holds for every Triton kernel, whichever file loads it first.
use_interpreter_without_cuda()
# One hash seed for every test worker (xdist starts them after this, with this environment):
# the released classes' choices may follow a set of strings' order (vLLM's HiSparse coordinator:
# docs/upstream-vllm.md, "The hash seed"), which would move a seeded trace's counts from run to
# run. A run without workers keeps the seed its process started with.
os.environ.setdefault("PYTHONHASHSEED", "0")
# Upstream SGLang and vLLM are imported only through kvfuzz's loader (which prepares torchvision
# on a CPU torch, `kvfuzz.impl.upstream_env`) and only when a test runs: at collection, their
# imports cost every pytest worker 20 to 30 s (`tests.helpers.needs_engine`).

# dev: quick local runs. ci: deterministic (same examples every run, no database), enough
# examples to reach every edge class. nightly: long runs on spare machines.
settings.register_profile("dev", max_examples=150, deadline=None)
settings.register_profile("ci", derandomize=True, database=None, max_examples=300,
                          deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("nightly", max_examples=20_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("KVFUZZ_CORPUS", ROOT / "corpus"))

# One torch thread per test process: xdist already puts a process on each core, the tensors here
# are small, and with two threads per process on a busy 2-core runner a case took 40x longer.
import torch  # noqa: E402

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """The slow tier first (a stable sort, each tier in its files' order): `pytest -n` hands
    tests out in this order, so the last ones a worker finishes are quick ones, and neither of
    CI's two workers sits idle while the other finishes a long shard or an older release's run
    (at c063c08 the durations summed to 3,389 s, 1,695 s a worker, and the run took 1,791 s;
    its last tests were then the SGLang tree cores' shards of 30 to 45 s each). Under xdist's
    default `load` this order left one worker more of the slow tier (at f3e71ec 2,470 s against
    2,156 s), hence `--dist worksteal` in pyproject's addopts: the worker that runs out takes
    the back half of the other's queue (2,325 s each; `tests/xdist_replay.py`)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# SGLang's switches that kvfuzz sets in its own process and leaves set: the SWA driver's
# SGLANG_INVARIANT_CHECK holds for the driver's life (SGLang reads it at every check), and a
# session run in process sets its retraction and tree-core switches. A test must not hand them
# to a later test in the same worker, whose subprocesses inherit them: a recorded SGLang session
# then claimed the strict checks (`swa/test_sglang_scheduler.py`'s recording, once xdist's
# worksteal order ran it after a strict SWA trace on the same worker).
SGLANG_SWITCHES = ("SGLANG_INVARIANT_CHECK", "SGLANG_DEBUG_MEMORY_POOL", "SGLANG_TEST_RETRACT",
                   "SGLANG_TEST_RETRACT_INTERVAL", "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND")


@contextlib.contextmanager
def environ_restored(names):
    """The environment variables `names` as they were before, on leaving (set or unset)."""
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(autouse=True)
def sglang_switches_restored():
    with environ_restored(SGLANG_SWITCHES):
        yield


@pytest.fixture(scope="session")
def sglang_server():
    """SGLang's scheduler imported once in a pytest worker's life, each session a process
    forked from it (`fuzz/allocator/sglang_zygote.py`): a fresh session spent some 9 of its
    12 CPU s importing torch and SGLang (2026-12-07)."""
    from kvfuzz.fuzz.allocator.sglang_zygote import SessionServer

    with SessionServer() as server:
        yield server
