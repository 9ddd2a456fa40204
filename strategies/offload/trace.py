"""The offload trace: what vLLM's offloading connector asks of its CPU offloading manager (vllm
0.33.0, `vllm/v1/kv_offload/cpu/manager.py`, with the LRU or ARC policy), as a sequence of ops,
and its version-stable JSON form ("kvfuzz-offload-trace/1"). Standard library only.

A request (`rid`) holds a chain of chunk hashes; with `groups` KV-cache groups its keys are
(hash, group) for every group, and chunk i of a request ends at token 16 * (i + 1), the position
the connector records for its keys (unless the request is made `positioned=False`). Range ops
name chunks [start, stop) of a request, group by group as the connector lists them. Requests
and their transfers resolve at run time: an op on a request that is not live (or already is,
for `new`) resolves to nothing, a completion names the request's oldest transfer in flight of
that kind, so a trace stays valid when a shrinker drops ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import Origin, dataclass_op_to_json, document_id, provenance

FORMAT = "kvfuzz-offload-trace/1"
POLICIES = ("lru", "arc")
TOKENS_PER_CHUNK = 16  # only positions' order matters; 16 makes them look like the connector's


@dataclass(frozen=True)
class New:
    """A request the scheduler sees for the first time: `on_new_request`, its keys' positions set
    in its context."""

    rid: int
    hashes: tuple[int, ...]
    positioned: bool = True


@dataclass(frozen=True)
class _Range:
    """Chunks [start, stop) of request `rid`."""

    rid: int
    start: int
    stop: int


@dataclass(frozen=True)
class Lookup(_Range):
    """`lookup` of chunks [start, stop) of each group, up to the group's first miss."""


@dataclass(frozen=True)
class Load(_Range):
    """The connector's load: the lookups, then `prepare_load` of the chunks every group has hit,
    unless one of them is still being stored (the request waits: no load)."""


@dataclass(frozen=True)
class Store(_Range):
    """`prepare_store` of chunks [start, stop): a transfer in flight when it stores anything."""


@dataclass(frozen=True)
class Touch(_Range):
    """`touch` of chunks [start, stop)."""


@dataclass(frozen=True)
class CompleteStore:
    """`complete_store` of the request's oldest store in flight, with `success` or failed."""

    rid: int
    success: bool = True


@dataclass(frozen=True)
class CompleteLoad:
    """`complete_load` of the request's oldest load in flight."""

    rid: int


@dataclass(frozen=True)
class Finish:
    """`on_request_finished`: no store, load, touch or lookup of the request after it; its
    transfers in flight may still complete. Again on a finished request: called again (the
    manager ignores it)."""

    rid: int


@dataclass(frozen=True)
class Events:
    """`take_events()`, drained at once."""


@dataclass(frozen=True)
class Reset:
    """`reset_cache()`: transfers in flight are stale (never completed, as the connector does)."""


Op = New | Lookup | Load | Store | Touch | CompleteStore | CompleteLoad | Finish | Events | Reset
KINDS = {"new": New, "lookup": Lookup, "load": Load, "store": Store, "touch": Touch,
         "complete_store": CompleteStore, "complete_load": CompleteLoad, "finish": Finish,
         "events": Events, "reset": Reset}
NAMES = {cls: name for name, cls in KINDS.items()}
RANGES = (Lookup, Load, Store, Touch)
CREATES = (New,)


@dataclass(frozen=True)
class Trace:
    """`CPUOffloadingManager(num_chunks=chunks, cache_policy=policy, enable_events=events,
    store_threshold=store_threshold, max_tracker_size=tracker_size)` driven by `ops`."""

    policy: str
    chunks: int
    groups: int
    events: bool
    store_threshold: int
    tracker_size: int
    ops: tuple[Op, ...]
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)

    def trace_id(self) -> str:
        return document_id(to_json(self))

    def describe(self) -> str:
        extra = f", store threshold {self.store_threshold} (tracker {self.tracker_size})" \
            if self.store_threshold >= 2 else ""
        return (f"{self.policy.upper()}, {self.chunks} chunks, {self.groups} group(s), events "
                f"{'on' if self.events else 'off'}{extra}, {len(self.ops)} ops")


def request_keys(hashes, groups: int, start: int, stop: int) -> list[tuple[int, int]]:
    """Keys (hash, group) of chunks [start, stop) of a request, group by group."""
    return [(h, g) for g in range(groups) for h in hashes[start:stop]]


def position(index: int) -> int:
    """The token where chunk `index` of a request ends: its key's recorded position."""
    return TOKENS_PER_CHUNK * (index + 1)


def events_pending_at_reset(trace: Trace) -> bool:
    """Whether a `reset` follows a completed store with no `events` between (exact enough without
    running: a completion that resolves to nothing is counted too)."""
    pending = False
    for op in trace.ops:
        if isinstance(op, Events):
            pending = False
        elif isinstance(op, CompleteStore) and op.success:
            pending = trace.events
        elif isinstance(op, Reset) and pending:
            return True
    return False


def describe_op(op: Op) -> str:
    if isinstance(op, New):
        tail = "" if op.positioned else ", no positions"
        return f"new r{op.rid}: {len(op.hashes)} chunks {list(op.hashes[:6])}" \
               f"{'...' if len(op.hashes) > 6 else ''}{tail}"
    if isinstance(op, RANGES):
        return f"{NAMES[type(op)]} r{op.rid} chunks [{op.start}:{op.stop})"
    if isinstance(op, CompleteStore):
        return f"complete_store r{op.rid} ({'success' if op.success else 'failed'})"
    if isinstance(op, (CompleteLoad, Finish)):
        return f"{NAMES[type(op)]} r{op.rid}"
    return NAMES[type(op)]


def to_json(trace: Trace) -> dict:
    return {"format": FORMAT, "policy": trace.policy, "chunks": trace.chunks,
            "groups": trace.groups, "events": trace.events,
            "store_threshold": trace.store_threshold, "tracker_size": trace.tracker_size,
            "ops": [dataclass_op_to_json(op, NAMES[type(op)]) for op in trace.ops],
            **provenance(trace)}
