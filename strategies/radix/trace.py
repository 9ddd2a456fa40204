"""The radix trace: what SGLang's scheduler asks of its prefix cache (`RadixCache`, sglang 0.5.23,
`mem_cache/radix_cache.py`) with a real allocator in the loop, as a sequence of ops, and its
version-stable JSON form ("kvfuzz-radix-trace/1"). Standard library only.

Requests are named by id (`rid`) and carry their whole token sequence from admission on (the
prompt, then the outputs a decode will produce), so a trace stays valid when a shrinker drops
ops: an op on a request that is not live resolves to nothing. Namespaces (`ns`) stand for the
cache's `extra_key` (0: none): keys of different namespaces never share a node. Nothing in the
format is specific to one cache class, so a cache with more components (the unified radix
cache) can read the same ops.

A trace with `swa_window` (tokens, 0: none) is one for a pure-SWA cache (`PureSWARadixCache`
over SGLang's `PureSWATokenToKVPoolAllocator`, page size 1): decode steps slide the request's
window first (`evict_sliding_windows`), and with `prefill_aware` each prefill chunk sets the
request's eviction floor (`swa_evict_floor`, what a prefill-aware model runner does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import Origin, dataclass_op_to_json, document_id, provenance

FORMAT = "kvfuzz-radix-trace/1"
POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru")
RESET_IN_FLIGHT = "reset with requests in flight"
# Not a misuse: a stream may leave request priorities out ("radix/2[no priorities]") for an
# entry that declares it runs without them (`profile.NO_PRIORITIES`).
PRIORITIES = "priorities"


@dataclass(frozen=True)
class Admit:
    """A new request `rid` whose prompt is `tokens[:prompt]` (the rest: the outputs it will
    decode): `match_prefix` of the prompt with the scheduler's limit (never its last token),
    `lock` of the matched node, the matched slots written into its row."""

    rid: int
    tokens: tuple[int, ...]
    prompt: int
    ns: int = 0
    priority: int = 0


@dataclass(frozen=True)
class Extend:
    """`count` more tokens of request `rid` get slots: a prefill chunk (never past the prompt's
    end while the prompt is not done) or, once it is, decode steps. The scheduler's order: evict
    the shortfall from the cache, then allocate (`alloc`, or `alloc_extend` above page size 1);
    refused, the request does not grow."""

    rid: int
    count: int


@dataclass(frozen=True)
class Checkpoint:
    """`checkpoint(req, up_to=filled)`: a chunk boundary (SGLang's cache_unfinished_req)."""

    rid: int


@dataclass(frozen=True)
class Finish:
    """Request `rid` is released: with `cache`, `checkpoint` first (cache_finished_req), then
    its own slots freed (`free_kv_row`), its lock dropped (`unlock`), its row freed."""

    rid: int
    cache: bool = True


@dataclass(frozen=True)
class Match:
    """`match_prefix` of `tokens` with no limit and no lock (a waiting request's priority)."""

    tokens: tuple[int, ...]
    ns: int = 0


@dataclass(frozen=True)
class Touch:
    """`touch_prefix` of `tokens`: recency refreshed along the cached path, nothing returned."""

    tokens: tuple[int, ...]
    ns: int = 0


@dataclass(frozen=True)
class Pin:
    """`match_prefix`, `lock`, `unlock` of `tokens` (the scheduler's `_lock_node` around a
    check): the lock counts rise along the path and come back."""

    tokens: tuple[int, ...]
    ns: int = 0


@dataclass(frozen=True)
class Insert:
    """A load-back: whole pages allocated for `tokens`, `insert(key, value)` with the caller's
    tensor (one slot a token, a partial last page's too), the duplicates (the part the tree had)
    and the partial page (which the tree does not cache) freed by the caller."""

    tokens: tuple[int, ...]
    ns: int = 0
    priority: int = 0


@dataclass(frozen=True)
class Evict:
    """`evict(num_tokens)`; with `relative`, num_tokens = evictable size + `count`."""

    count: int
    relative: bool = False


@dataclass(frozen=True)
class Reset:
    """The scheduler's flush: `reset()` of the cache, `clear()` of the allocator and the rows.
    SGLang flushes only when idle; requests still live here hold locks of the old tree, and
    finishing one then only drops that lock."""


Op = Admit | Extend | Checkpoint | Finish | Match | Touch | Pin | Insert | Evict | Reset
KINDS = {"admit": Admit, "extend": Extend, "checkpoint": Checkpoint, "finish": Finish,
         "match": Match, "touch": Touch, "pin": Pin, "insert": Insert, "evict": Evict,
         "reset": Reset}
NAMES = {cls: name for name, cls in KINDS.items()}
CREATES = (Admit,)


@dataclass(frozen=True)
class Trace:
    """A prefix cache over `size` slots in pages of `page_size` (the allocator: token at page
    size 1, paged above), evicting by `policy`, with KV events on or off, driven by `ops`."""

    page_size: int
    size: int
    policy: str
    events: bool
    ops: tuple[Op, ...]
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)
    swa_window: int = 0  # a pure-SWA cache's sliding window, in tokens (0: no window)
    prefill_aware: bool = False  # prefill chunks set the request's swa_evict_floor

    def trace_id(self) -> str:
        return document_id(to_json(self))

    def describe(self) -> str:
        window = ""
        if self.swa_window:
            floor = "prefill-aware floor" if self.prefill_aware else "no floor"
            window = f"pure SWA, window {self.swa_window} ({floor}), "
        return (f"{window}{self.size} slots in pages of {self.page_size}, {self.policy} "
                f"eviction, events {'on' if self.events else 'off'}, {len(self.ops)} ops")


def prioritized(trace: Trace) -> int:
    """How many ops carry a request or insert priority other than 0."""
    return sum(bool(getattr(op, "priority", 0)) for op in trace.ops)


def resets_in_flight(trace: Trace) -> int:
    """How many resets find requests live (admitted, not finished, not voided by an earlier
    reset): exact without running it, since admission never fails."""
    seen, live, found = set(), set(), 0
    for op in trace.ops:
        if isinstance(op, Admit) and op.rid not in seen:
            seen.add(op.rid)
            live.add(op.rid)
        elif isinstance(op, Finish):
            live.discard(op.rid)
        elif isinstance(op, Reset):
            found += bool(live)
            live.clear()
    return found


def _tokens(tokens) -> str:
    shown = " ".join(str(t) for t in tokens[:12])
    return f"[{shown}{' ...' if len(tokens) > 12 else ''}] ({len(tokens)})"


def describe_op(op: Op) -> str:
    ns = f" ns{op.ns}" if getattr(op, "ns", 0) else ""
    if isinstance(op, Admit):
        extra = f" priority {op.priority}" if op.priority else ""
        return f"admit r{op.rid} prompt {op.prompt} of {_tokens(op.tokens)}{ns}{extra}"
    if isinstance(op, Extend):
        return f"extend r{op.rid} by {op.count}"
    if isinstance(op, (Checkpoint, Finish)):
        tail = "" if not isinstance(op, Finish) or op.cache else " (not cached)"
        return f"{NAMES[type(op)]} r{op.rid}{tail}"
    if isinstance(op, (Match, Touch, Pin, Insert)):
        return f"{NAMES[type(op)]} {_tokens(op.tokens)}{ns}"
    if isinstance(op, Evict):
        return f"evict evictable{op.count:+d}" if op.relative else f"evict {op.count}"
    return "reset"


def to_json(trace: Trace) -> dict:
    # written only with a window: every trace without one keeps its document (and its id)
    window = {"swa_window": trace.swa_window, "prefill_aware": trace.prefill_aware} \
        if trace.swa_window else {}
    return {"format": FORMAT, **window, "page_size": trace.page_size, "size": trace.size,
            "policy": trace.policy, "events": trace.events,
            "ops": [dataclass_op_to_json(op, NAMES[type(op)]) for op in trace.ops],
            **provenance(trace)}
