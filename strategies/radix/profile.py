"""What a prefix cache may declare (`Implementation.preconditions`): that it does not support a
reset while requests are in flight, which SGLang's scheduler never does (its flush waits for
idle): its generator leaves that out, and a trace that has it is outside its contract
(`broken`); and that `insert` keeps the caller's key, whose token array the harness then leaves
as it is after the call (every in-tree caller hands over a fresh key); and, for the pure-SWA
cache, that it models its sliding window (`WINDOW`: the window traces) and runs it prefill-aware
only (`PREFILL_AWARE`); and, for a history pass, that it runs without priorities
(`NO_PRIORITIES`). Standard library only."""

from __future__ import annotations

from kvfuzz.strategies.radix.trace import (PRIORITIES, RESET_IN_FLIGHT, Trace, prioritized,
                                           resets_in_flight)

NO_RESET_IN_FLIGHT = ("no reset while requests are in flight (SGLang's flush_cache runs only "
                      "when the scheduler is idle)")
KEEPS_KEY = ("keeps the caller's RadixKey (a new branch of a page-size-1 tree is the key object "
             "itself): the harness does not rewrite a key's token array after the call")
# A history pass, not a contract: where a release drops a finished request's priority
# (PureSWARadixCache 0.5.15-0.5.20, docs/release-history.md Q) every prioritized trace stops
# there; the entry that declares this runs the same traces with every priority 0.
NO_PRIORITIES = "runs without request priorities (every admission and insert at priority 0)"
PRECONDITIONS = {RESET_IN_FLIGHT: NO_RESET_IN_FLIGHT, PRIORITIES: NO_PRIORITIES}
# A profile, not a misuse: the entry builds the pure-SWA cache with its window on SGLang's
# pure-SWA allocator and gets the "radix-window/1" traces (each with its window).
WINDOW = ("models PureSWARadixCache's sliding window (sliding_window_size = the trace's "
          "swa_window, SGLang's PureSWATokenToKVPoolAllocator, evict_sliding_windows before "
          "decode steps): it runs the radix-window traces")
# Without the floor a checkpoint caches what the window freed (docs/upstream-sglang.md); the
# one model of 0.5.23 that declares prefill-aware SWA (unlimited_ocr) always sets it.
PREFILL_AWARE = ("runs its window prefill-aware only (every prefill chunk sets "
                 "swa_evict_floor, as model_runner.prefill_aware_swa does)")
WINDOW_NEEDED = "a trace with a swa_window needs a cache that declares its window"


def unsupported(preconditions) -> frozenset:
    """The misuse kinds the declared `preconditions` rule out."""
    return frozenset(kind for kind, text in PRECONDITIONS.items() if text in preconditions)


def window_of(preconditions) -> bool:
    return WINDOW in preconditions


def broken(trace: Trace, preconditions) -> list[str]:
    found = []
    if NO_RESET_IN_FLIGHT in preconditions and resets_in_flight(trace):
        found.append(NO_RESET_IN_FLIGHT)
    if NO_PRIORITIES in preconditions and prioritized(trace):
        found.append(NO_PRIORITIES)
    window = getattr(trace, "swa_window", 0)
    if window and WINDOW not in preconditions:
        found.append(WINDOW_NEEDED)
    if window and PREFILL_AWARE in preconditions and not trace.prefill_aware:
        found.append(PREFILL_AWARE)
    return found
