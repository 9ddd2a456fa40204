"""`kvfuzz bench guard`: what `kvfuzz.guard` and `kvfuzz.record` cost per call of a live vLLM
`KVCacheManager` and of its `BlockPool`, in vLLM's own v1 scheduler
(fuzz/kvmanager/vllm_scheduler.py): the same seeded sessions with the object bare, recorded and
guarded, the time inside its methods (as their caller calls them) divided by the calls. Figures
are printed, never asserted."""

from __future__ import annotations

import importlib.util
import time
from collections import Counter

FULL_SESSIONS, QUICK_SESSIONS = 10, 2


class Timed:
    """Stands for the scheduler's manager or its pool (bare or wrapped): the seconds its
    methods take, and how many calls, by method."""

    def __init__(self, manager):
        vars(self).update(_manager=manager, seconds=Counter(), calls=Counter())

    def __getattr__(self, name: str):
        value = getattr(self._manager, name)
        if not callable(value):
            return value

        def timed(*args, **kwargs):
            began = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - began
                self.calls[name] += 1
        return timed

    def __setattr__(self, name: str, value) -> None:
        setattr(self._manager, name, value)


# What each guarded object is, and its calls the trace models (the others are reads).
OBJECTS = {
    "kvmanager": ("KVCacheManager", ("get_computed_blocks", "allocate_slots", "free",
                                     "evict_blocks", "reset_prefix_cache")),
    "blockpool": ("BlockPool", ("get_new_blocks", "touch", "free_blocks", "unpin_blocks",
                                "cache_full_blocks", "get_cached_block", "evict_blocks",
                                "reset_prefix_cache")),
}


def measure(target: str, mode: str, sessions: int) -> tuple[Counter, Counter, float, int]:
    """(seconds by method, calls by method, session seconds, trace ops) over `sessions` with
    `target`'s object (the manager, or its pool) bare, recorded or guarded."""
    from kvfuzz.fuzz.engine.guard import live_guard
    from kvfuzz.fuzz.kvmanager.vllm_scheduler import run_session

    guard = live_guard(target)  # what kvfuzz.guard and kvfuzz.record call
    wraps = {"bare": lambda obj, **settings: obj,
             "record": lambda obj, **settings: guard(obj, check=False, **settings),
             "guard": lambda obj, **settings: guard(obj, check=True, **settings)}
    seconds, calls, wall, ops = Counter(), Counter(), 0.0, 0
    for seed in range(sessions):
        timers = []

        def wrap(obj, **settings):
            timers.append(Timed(wraps[mode](obj, **settings)))
            return timers[-1]
        began = time.perf_counter()
        if target == "blockpool":
            run_session(seed, wrap_pool=wrap)
        else:
            run_session(seed, wrap)
        wall += time.perf_counter() - began
        seconds.update(timers[0].seconds)
        calls.update(timers[0].calls)
        session = getattr(timers[0]._manager, "kvfuzz_session", None)
        ops += len(session.ops) if session is not None else 0
    return seconds, calls, wall, ops


def main(quick: bool, out_dir=None) -> int:
    if importlib.util.find_spec("vllm") is None:
        print("\n### kvfuzz bench guard\n\nnot run: needs vllm (kvfuzz upstream fetch)")
        return 0
    sessions = QUICK_SESSIONS if quick else FULL_SESSIONS
    measure("kvmanager", "bare", 1)  # warm-up: imports, the first scheduler's construction
    print(f"\n### kvfuzz bench guard{' --quick' if quick else ''}\n\n"
          f"vLLM's v1 scheduler, {sessions} seeded sessions (10 requests each, shared prefixes, "
          f"chunked prefill, preemption) per row, one process, CPU; the scheduler's manager, or "
          f"the pool under it, bare, recorded or guarded. Per call: the time inside the "
          f"object's methods as their caller calls them (the wrapper's work included), divided "
          f"by the calls; the reads made every step (usage, events, stats, free blocks) count "
          f"as calls too.\n")
    print("| object | mode | calls | trace ops | us per call | us per modelled call | vs bare "
          "| session s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for target, (label, modelled) in OBJECTS.items():
        bare_per_call = None
        for mode in ("bare", "record", "guard"):
            seconds, calls, wall, ops = measure(target, mode, sessions)
            total_calls = sum(calls.values())
            per_call = 1e6 * sum(seconds.values()) / max(total_calls, 1)
            per_modelled = 1e6 * sum(seconds[m] for m in modelled) / max(
                sum(calls[m] for m in modelled), 1)
            bare_per_call = bare_per_call or per_modelled
            print(f"| {label} | {mode} | {total_calls:,} | {ops:,} | {per_call:,.1f} "
                  f"| {per_modelled:,.1f} | {per_modelled / bare_per_call:.1f}x | {wall:.2f} |",
                  flush=True)
    return 0
