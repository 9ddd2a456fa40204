"""Timing helpers: a prepared zero-argument call per (implementation, case), the median of
repeated runs by `torch.utils.benchmark` (it warms up, then repeats in blocks), and this machine's
memory-copy bandwidth as a floor to compare with.

Times are the calling thread's CPU time, not wall time: with one torch thread every op runs on
it, and on a shared 2-core machine wall time mostly measures the neighbours (it varied 3x here).
"""

from __future__ import annotations

import time

import torch
from torch.utils import benchmark

from kvfuzz.impl.paged.calling import build_inputs


CLOCK = time.thread_time
CLOCK_NAME = "thread CPU time"


def prepared_call(fn, case):
    """A closure that runs `fn` on tensors built once; the output buffer is reused across runs."""
    inputs = build_inputs(case)
    if case.target == "extend":
        args = (inputs["prefix_lens"], inputs["seq_lens"], inputs["last_loc"],
                inputs["free_pages"], inputs["out_indices"], case.page_size, "cpu")
    else:
        # The caller's host-side count (spec §3 with P == 1 counted exactly), computed once here
        # so its Python loop is not timed.
        num_new_pages = sum((s - 1) % case.page_size == 0 for s in case.seq_lens)
        args = (inputs["seq_lens"], inputs["last_loc"], inputs["free_pages"],
                inputs["out_indices"], case.page_size, num_new_pages)
    return (lambda: fn(*args)), inputs["out_indices"]


def median_seconds(call, min_run_time: float) -> float:
    """Median time of one call: blocks of repeated calls until `min_run_time` has passed."""
    call()  # warm-up outside the measurement (first-call allocations, lazy init)
    timer = benchmark.Timer(stmt="call()", globals={"call": call}, timer=CLOCK,
                            num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def copy_bandwidth(num_bytes: int, min_run_time: float = 0.3) -> float:
    """Bytes written per second by an int64 tensor copy of `num_bytes` (the copy also reads as
    many: the floor for any function that must at least produce its output from memory)."""
    source = torch.ones(num_bytes // 8, dtype=torch.int64)
    target = torch.empty_like(source)
    return num_bytes / median_seconds(lambda: target.copy_(source), min_run_time)


def fill_bandwidth(num_bytes: int, min_run_time: float = 0.3) -> float:
    """Bytes per second of writing an int64 tensor of `num_bytes` (fill_: writes, reads nothing)."""
    target = torch.empty(num_bytes // 8, dtype=torch.int64)
    return num_bytes / median_seconds(lambda: target.fill_(7), min_run_time)
