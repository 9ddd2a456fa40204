"""What the unified target reads of a release's SWA window free (`free_swa_out_of_window_slots`
in `sglang/srt/mem_cache/common.py`), for the oracle's contract (oracle/radix/contract.py,
`LIFTS_SWA_CURSOR`): from SGLang 0.5.21 on it returns at once where the window has not moved
past `eviction_interval` tokens; in 0.5.20, which has no such parameter, it first raises the
request's SWA cursor to its protected length, moved or not. Read from the module the loaded
class's release has imported already (nothing is imported here: a class that is not SGLang's
has nothing to read)."""

from __future__ import annotations

import inspect
import sys

COMMON = "sglang.srt.mem_cache.common"


def lifts_swa_cursor() -> bool:
    """Whether the loaded release's window free lifts the cursor before its interval check."""
    common = sys.modules.get(COMMON)
    free = getattr(common, "free_swa_out_of_window_slots", None)
    if not callable(free):
        return False
    try:
        parameters = inspect.signature(free).parameters
    except (TypeError, ValueError):
        return False
    return "eviction_interval" not in parameters


ENVIRON = "sglang.srt.environ"
WINDOW_FREE_SWITCH = "SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS"


def checkpoint_frees_window() -> bool:
    """Whether the loaded release's `cache_unfinished_req` frees the request's out-of-window SWA
    slots at a checkpoint: its switch `SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS`, read as
    the release reads it (`envs.<switch>.get()`: the environment, else the release's default,
    off in 0.5.17, on from 0.5.18). A release without the switch frees there (it has no other
    way); nothing loaded, nothing read: True."""
    envs = getattr(sys.modules.get(ENVIRON), "envs", None)
    switch = getattr(envs, WINDOW_FREE_SWITCH, None)
    if switch is None or not callable(getattr(switch, "get", None)):
        return True
    return bool(switch.get())
