"""A KV connector's external tokens beside a Mamba group in mode "none" or "all" (prefix caching
off: the "mamba plain connector" profile), judged by the plain connector judge (`connector.py`)
since 2026-12-08; this module names its edge classes and checks the Mamba group's table after
each admission with external tokens, read from the implementation.

What vLLM 0.33.0 does there (`single_type_kv_cache_manager.py`): `MambaManager.
get_num_skipped_tokens` is c - 1 in every mode, so an admission with c computed tokens (the
local hit 0 with caching off: every one external) pads (c - 1) // b null blocks
(`add_local_computed_blocks`) and `allocate_external_computed_blocks` takes one block for the
last token's state, the only state the worker fills: `[0, 0, b]` for 12 tokens in blocks of 4.
The oracle's tables say the same (`oracle/kvmanager/model.py`, `skipped_tokens`); this check
says it without the oracle, so a table both got wrong alike is still seen.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import short

SYNC = "Mamba (no caching): external tokens loaded with the step"
LOAD = "Mamba (no caching): an asynchronous load"
NULLED = "Mamba (no caching): the external tokens' earlier states null"
INSIDE = "Mamba (no caching): external tokens ending inside a block"
EVENTS = (SYNC, LOAD, NULLED, INSIDE)


def plain_mamba(trace) -> bool:
    """A Mamba group in mode "none" or "all" (the "align" one is judged in its reduced mode)."""
    return trace.mamba_mode in ("none", "all")


def admitted(count, trace, rid: int, tables, computed: int, load: bool) -> list:
    """After an admission of `rid` with external tokens, `computed` tokens (hit and external)
    counted computed: the edge classes counted, and the Mamba group's table (group 1) null
    below the last computed token's state block, (computed - 1) // b, and a real block
    there."""
    size = trace.sizes[1]  # (the Mamba group's own block size, 2026-12-08)
    last = (computed - 1) // size
    count(LOAD if load else SYNC)
    if last:
        count(NULLED)
    if computed % size:
        count(INSIDE)
    table = tables[1]
    if len(table) <= last or not table[last] or any(table[:last]):
        return [("external blocks", f"r{rid} Mamba group: blocks {short(table)} after "
                                    f"{computed} computed tokens in blocks of {size}; "
                                    f"expected {last} null blocks, then the last state's "
                                    f"block")]
    return []
