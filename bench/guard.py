"""`kvfuzz bench guard`: what `kvfuzz.guard` and `kvfuzz.record` cost per call of a live vLLM
`KVCacheManager` and of its `BlockPool`, in vLLM's own v1 scheduler
(fuzz/kvmanager/vllm_scheduler.py): the same seeded sessions with the object bare, recorded and
guarded, the time inside its methods (as their caller calls them) divided by the calls. Figures
are printed, never asserted."""

from __future__ import annotations

import importlib.util
import time
from collections import Counter

FULL_SESSIONS, QUICK_SESSIONS = 10, 1


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
            began = time.thread_time()  # on a shared machine, wall time is the neighbours'
            try:
                return value(*args, **kwargs)
            finally:
                self.seconds[name] += time.thread_time() - began
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


# The SGLang allocator's calls that become trace ops (the rest are reads and capacity queries).
SGLANG_MODELLED = ("alloc", "alloc_extend", "alloc_decode", "free", "free_full", "free_segment",
                   "free_full_segment", "free_segments", "free_full_segments", "free_page_ids",
                   "free_group_begin", "free_group_end", "clear")


# ... and its SWA allocator's (the releases it takes on its pools themselves, past the counter,
# are not counted: `full_attn_allocator.free_segment` from the unified radix cache).
SWA_MODELLED = (*SGLANG_MODELLED, "free_swa", "free_swa_segment", "alloc_extend_swa_tail",
                "set_full_to_swa_mapping", "clear_full_to_swa_mapping")


def measure_sglang(mode: str, sessions: int, swa: bool = False):
    """The same figures for SGLang's own scheduler and its paged allocator, each session in a
    process of its own (one scheduler per process): the time inside the allocator's methods as
    the session's command reports it; the session's wall time less its start-up is not known
    there, so the command's own wall time is given."""
    if importlib.util.find_spec("sglang") is None:
        return None, None, 0.0, 0
    import tempfile

    from kvfuzz.fuzz.allocator.sglang_scheduler import session_in_subprocess

    seconds, calls, wall, ops = Counter(), Counter(), 0.0, 0
    options = {"bare": [], "guard": ["--guard", "--corpus", tempfile.mkdtemp()],
               "record": ["--record", tempfile.mkdtemp()]}[mode]
    for seed in range(sessions):
        began = time.perf_counter()
        line = session_in_subprocess(seed, ["--retract", *(["--swa"] if swa else []),
                                            *options])
        wall += time.perf_counter() - began
        if "divergence" in line:
            raise RuntimeError(f"SGLang session {seed} diverged: {line['divergence']['report']}")
        seconds.update(line["seconds"])
        calls.update(line["calls"])
        ops += line.get("ops", 0)
    return seconds, calls, wall, ops


def main(quick: bool, out_dir=None) -> int:
    if importlib.util.find_spec("vllm") is None:
        print("\n### kvfuzz bench guard\n\nnot run: needs vllm (kvfuzz upstream fetch)")
        return 0
    sessions = QUICK_SESSIONS if quick else FULL_SESSIONS
    measure("kvmanager", "bare", 1)  # warm-up: imports, the first scheduler's construction
    print(f"\n### kvfuzz bench guard{' --quick' if quick else ''}\n\n"
          f"vLLM's v1 scheduler and SGLang's scheduler, {sessions} seeded sessions (10 requests "
          f"each, shared prefixes, chunked prefill, preemption or forced retraction) per row, "
          f"CPU; vLLM's manager, or the pool under it, and SGLang's paged allocator (and its "
          f"SWA allocator, under a sliding-window model), bare, "
          f"recorded or guarded. Per call: the thread CPU time inside the object's methods as "
          f"their caller calls them (the wrapper's work included), divided by the calls; the reads "
          f"made every step (usage, events, stats, free blocks, capacity queries) count as calls "
          f"too. vLLM's sessions run in this process, SGLang's one process each (its session "
          f"seconds include about 9 s of start-up).\n")
    print("| object | mode | calls | trace ops | us per call | us per modelled call | vs bare "
          "| session s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rows = [(label, modelled, [(mode, *measure(target, mode, sessions))
                               for mode in ("bare", "record", "guard")])
            for target, (label, modelled) in OBJECTS.items()]
    rows.append(("SGLang allocator", SGLANG_MODELLED,
                 [(mode, *measure_sglang(mode, sessions)) for mode in ("bare", "record", "guard")]))
    rows.append(("SGLang SWA allocator", SWA_MODELLED,
                 [(mode, *measure_sglang(mode, sessions, swa=True))
                  for mode in ("bare", "record", "guard")]))
    for label, modelled, measured in rows:
        bare_per_call = None
        for mode, seconds, calls, wall, ops in measured:
            if calls is None:
                print(f"| {label} | {mode} | not run: needs sglang (kvfuzz upstream fetch) "
                      f"| | | | | |")
                continue
            total_calls = sum(calls.values())
            per_call = 1e6 * sum(seconds.values()) / max(total_calls, 1)
            per_modelled = 1e6 * sum(seconds[m] for m in modelled) / max(
                sum(calls[m] for m in modelled), 1)
            bare_per_call = bare_per_call or per_modelled
            print(f"| {label} | {mode} | {total_calls:,} | {ops:,} | {per_call:,.1f} "
                  f"| {per_modelled:,.1f} | {per_modelled / bare_per_call:.1f}x | {wall:.2f} |",
                  flush=True)
    return 0
