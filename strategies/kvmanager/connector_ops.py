"""The KV-connector ops of a `kvmanager` trace: an admission whose prompt a KV connector
(P/D disaggregation, an offloading tier) partly supplies, and the report that its asynchronous
load is done. Standard library only; `trace.py` takes them into its op set.

vLLM 0.33.0's scheduler with a connector (`Scheduler.schedule`, `_update_waiting_for_remote_kv`):
the local lookup (`get_computed_blocks_for_connector`), the connector's count of tokens it holds
beyond that hit (`get_num_new_matched_tokens`: external tokens, loaded now or asynchronously),
then `allocate_slots` with `num_external_computed_tokens`; an asynchronous load allocates no
slots of its own (0 new tokens, no draft slots), keeps `reserved_blocks` free for the prefills in
flight, and delays caching (`delay_cache_blocks`) until the load is reported: then
`cache_blocks(request, num_computed_tokens)` (and, for a failed load with a valid prefix where
blocks are zeroed, `record_blocks_for_zeroing` from that prefix; a failed load with nothing valid
frees the request)."""

from __future__ import annotations

from dataclasses import dataclass, field

EVERY_GROUP = -1  # `Connect.written`: the load writes every group (the connector's default)


@dataclass(frozen=True)
class Connect:
    """A waiting request admitted with a KV connector: the connector holds up to `external`
    tokens past the local hit (resolved at run time to what the request leaves: all of it for
    an asynchronous load, all but the last token for a synchronous one; 0 makes it a plain
    admission). `load`: the load is asynchronous (the request waits for it, nothing past the
    hit is cached until `loaded`); `reserve`: the free blocks it must leave to prefills in
    flight (`reserved_blocks`, asynchronous loads only). A synchronous load schedules up to
    `chunk` new tokens with it. `written`: the groups an asynchronous load writes, a bit per
    group (the connector's `get_loaded_kv_cache_group_ids`, passed as
    `skip_zeroing_group_ids`): where blocks are zeroed, the external blocks of the other
    groups are recorded for zeroing; -1, every group (a file without it reads so). `pad`:
    the scheduler's spec-decode padding (`Schedule.pad`): where a synchronous load leaves one
    token, it is admitted with `1 + pad` new tokens, `pad` placeholder draft rows past the
    request's tokens (an asynchronous load's admission is never padded; 0, a file without it,
    none); `rows_in_flight` (asynchronous scheduling, `Schedule.rows_in_flight`): those rows
    counted computed and in flight until the step's output rolls them back. `max_hit` (since
    2026-12-07; -1, a file without it, none): the caller's cap on the connector's lookup, as
    `Schedule.max_hit` (the auxiliary-output connector's `max_cache_hit`, passed by vLLM
    0.33.0's scheduler to `get_computed_blocks_for_connector`), which also drops the external
    tokens unless the hit and they end on a block at most there (`cap_external_hit`)."""

    rid: int
    chunk: int
    external: int
    load: bool = False
    reserve: int = 0
    written: int = field(default=EVERY_GROUP, metadata={"later": True})
    pad: int = field(default=0, metadata={"later": True})
    rows_in_flight: bool = field(default=False, metadata={"later": True})
    max_hit: int = field(default=-1, metadata={"later": True})


@dataclass(frozen=True)
class Loaded:
    """The connector reports request `rid`'s asynchronous load done: `valid` -1, loaded
    (its blocks cached up to its computed tokens); else failed with the first `valid` tokens
    good (cut to the scheduler block, and to what the request had): 0 frees the request (it is
    admitted again through the cache), more caches that prefix and records the blocks after it
    for zeroing. Right after a synchronous load's admission, a failure (`valid` >= 0) rewinds
    the running request's computed tokens to that prefix (no call: its blocks stay cached and
    are computed again); under asynchronous scheduling (since 2026-12-06) also beneath the
    request's next step, in flight, which stays counted, the admission step's output skipped
    (its placeholder, where it sampled, left unresolved: vLLM 0.33.0's `update_from_output`).
    Resolves to nothing for a request neither loading nor so. `inside_hit` (since 2026-12-06;
    false, a file without it): an asynchronous load's failed block lies inside the request's
    local hit (a block of another request's failed synchronous load, which it hit), so its
    valid tokens are cut below the hit too, not at it."""

    rid: int
    valid: int = -1
    inside_hit: bool = field(default=False, metadata={"later": True})


@dataclass(frozen=True)
class Cut:
    """The scheduler cuts running request `rid`'s computed tokens to `to` for a failed KV block
    it holds without a synchronous load of its own there: a block it shares through a prefix
    hit on another request's failed synchronous load, or its own load's block that a request
    before it in the running queue marked first (vLLM 0.33.0's
    `_update_requests_with_invalid_blocks`, "recompute" policy: to the first failed block's
    start where it is the first to hold it, else back to its computed tokens before the step,
    the others recomputing the block). No call: its blocks stay, cached; its step's output is
    skipped. Resolves to nothing for a request not running, a `to` past its computed tokens,
    or under asynchronous scheduling (not mapped there yet)."""

    rid: int
    to: int


OPS = {"connect": Connect, "loaded": Loaded, "cut": Cut}


def describe(op) -> str:
    if isinstance(op, Connect):
        how = "asynchronously" if op.load else f"with up to {op.chunk} new tokens" + (
            f" ({op.pad} placeholder drafts where one is left"
            f"{', in flight until its output' if op.rows_in_flight else ''})" if op.pad else "")
        reserve = f", {op.reserve} blocks reserved" if op.load and op.reserve else ""
        if op.load and op.written != EVERY_GROUP:
            groups = [g for g in range(op.written.bit_length()) if op.written >> g & 1]
            reserve += f", writing groups {groups or 'none'}"
        return f"r{op.rid} admitted with up to {op.external} external tokens, {how}{reserve}"
    if isinstance(op, Cut):
        return f"r{op.rid}'s computed tokens cut to {op.to} (a failed block it holds)"
    if op.valid < 0:
        return f"r{op.rid}'s load done"
    inside = " (a failed block inside its local hit)" if op.inside_hit else ""
    return f"r{op.rid}'s load failed, {op.valid} tokens valid{inside}"
