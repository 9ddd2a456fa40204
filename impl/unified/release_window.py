"""What the unified target reads of a release's SWA window free (`free_swa_out_of_window_slots`
in `sglang/srt/mem_cache/common.py`), for the oracle's contract (oracle/radix/contract.py,
`LIFTS_SWA_CURSOR`): from SGLang 0.5.21 on it returns at once where the window has not moved
past `eviction_interval` tokens; in 0.5.20, which has no such parameter, it first raises the
request's SWA cursor to its protected length, moved or not. And (`SWA_PAGE_MARGIN`) 0.5.14's
keeps one page past the window (`pre_len - sliding_window_size - page_size`) unless told not to
(its `drop_page_margin` parameter, which a radix cache never passes, or the environment's
`SGLANG_OPT_SWA_EVICT_DROP_PAGE_MARGIN`); 0.5.15 on keep `max(window, page)`. And
(`NO_CHECKPOINT_WINDOW_FREE`) whether a checkpoint calls that free at all. Read from the modules
the loaded class's release has imported already (nothing is imported here: a class that is not
SGLang's has nothing to read)."""

from __future__ import annotations

import inspect
import sys

COMMON = "sglang.srt.mem_cache.common"


def lifts_swa_cursor() -> bool:
    """Whether the loaded release's window free lifts the cursor before its interval check."""
    parameters = _parameters()
    return parameters is not None and "eviction_interval" not in parameters


def frees_window_at_checkpoint() -> bool:
    """Whether the loaded release's checkpoint frees the request's SWA slots out of the window:
    where the environment's `SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS` says so (it came
    with that free, in 0.5.14; False by default until 0.5.18); never before it (0.5.11-0.5.13:
    the scheduler's `_evict_swa` alone slid the window). With no SGLang environment loaded
    there is nothing to read: today's contract (it frees)."""
    environ = getattr(sys.modules.get("sglang.srt.environ"), "envs", None)
    if environ is None:
        return True
    flag = getattr(environ, "SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS", None)
    return callable(getattr(flag, "get", None)) and bool(flag.get())


def keeps_page_margin() -> bool:
    """Whether the loaded release's window free keeps a page past the window (0.5.14)."""
    parameters = _parameters()
    if parameters is None or "drop_page_margin" not in parameters:
        return False
    environ = getattr(sys.modules.get("sglang.srt.environ"), "envs", None)
    flag = getattr(environ, "SGLANG_OPT_SWA_EVICT_DROP_PAGE_MARGIN", None)
    return not (callable(getattr(flag, "get", None)) and flag.get())


def _parameters():
    """The parameters of the loaded release's `free_swa_out_of_window_slots` (None: none)."""
    free = getattr(sys.modules.get(COMMON), "free_swa_out_of_window_slots", None)
    if not callable(free):
        return None
    try:
        return inspect.signature(free).parameters
    except (TypeError, ValueError):
        return None
