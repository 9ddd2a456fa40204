"""The SWA trace: a scheduler's operations on a hybrid full + sliding-window KV allocator
(upstream `SWATokenToKVPoolAllocator`: two pools, every full slot of a live token mapped to its
SWA slot until the window passes it), and its version-stable JSON form ("kvfuzz-swa-trace/1").
Standard library only.

Ops name requests by id (`rid`) and resolve at run time against the live requests, so a trace
stays valid when a shrinker drops ops or requests. Group ops always run: a begin inside an open
group is a nested begin (which must be rejected, changing nothing), an end with none open a stray
end (which must do nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import (Origin, dataclass_op_to_json, document_id, few,
                                      provenance)
from kvfuzz.strategies.swa import scheduler_ops
from kvfuzz.strategies.swa.scheduler_ops import Cache, Misuse, Offload, Reclaim, Resize

FORMAT = "kvfuzz-swa-trace/1"
HOWS = ("set", "segment")  # free(slots) / free_swa(slots) vs the *_segment(slots, start_pos) forms


@dataclass(frozen=True)
class Admit:
    """A new request, no tokens yet."""

    rid: int


@dataclass(frozen=True)
class Extend:
    """A prefill chunk: each live request of `rids` grows by its `lens` tokens, in one call
    (`alloc(sum)` at page size 1, `alloc_extend` above)."""

    rids: tuple[int, ...]
    lens: tuple[int, ...]


@dataclass(frozen=True)
class ExtendTail:
    """A request with no tokens yet receives `len` tokens (`alloc_extend_swa_tail`, page size 2
    and up, as a disaggregated decode server admits a transferred prefill): full slots for all of
    them, SWA slots only for the tail, which starts at the last page boundary at or before
    `len - tail` and keeps at least one token; the tokens before it are outside the window. A
    `len` of 0 is a call with nothing to allocate (and a tail of 0)."""

    rid: int
    len: int
    tail: int


@dataclass(frozen=True)
class Decode:
    """One token for each live request of `rids` (all live requests when empty). `checked`: the
    scheduler first checks that both pools have room and skips the step when not (SGLang's
    `check_decode_mem` retracts instead); unchecked, the call may run short."""

    rids: tuple[int, ...] = ()
    checked: bool = True


@dataclass(frozen=True)
class Evict:
    """Window eviction: the SWA slots of the request's tokens older than its last `keep` (at
    least 1: a sliding window is never empty), whole pages only, are released (`free_swa`, or
    `free_swa_segment` with `how="segment"`); the full slots stay."""

    rid: int
    keep: int
    how: str = "set"


@dataclass(frozen=True)
class Finish:
    """The request's slots released: `free_full` for the tokens the window already passed,
    `free` for the rest (with `how="segment"`: `free_full_segment` and `free_segment`)."""

    rid: int
    how: str = "set"


@dataclass(frozen=True)
class GroupBegin:
    """`free_group_begin()`."""


@dataclass(frozen=True)
class GroupEnd:
    """`free_group_end()`."""


@dataclass(frozen=True)
class Clear:
    """`clear()`: both pools free, the mapping empty, every request gone."""


# The allocator's own calls, by slot: what a live guard sees (`kvfuzz.guard(allocator, "swa")`:
# an engine's calls carry lengths and full slots, not requests). The full pages they hand out
# are held by "the engine", and so are the SWA peers of its full slots, until a release names
# them; the mapping must pair exactly the engine's full slots that still have a peer.
@dataclass(frozen=True)
class AllocSlots:
    """`alloc(need_size)` (page size 1)."""

    need_size: int


@dataclass(frozen=True)
class ExtendSlots:
    """`alloc_extend` of this batch."""

    prefix_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    last_loc: tuple[int, ...]


@dataclass(frozen=True)
class ExtendTailSlots:
    """`alloc_extend_swa_tail` of one request: SWA slots for its last `tail` tokens only."""

    prefix_len: int
    seq_len: int
    last_loc: int
    tail: int


@dataclass(frozen=True)
class DecodeSlots:
    """`alloc_decode` of this batch."""

    seq_lens: tuple[int, ...]
    last_loc: tuple[int, ...]


@dataclass(frozen=True)
class FreeSlots:
    """`free` (`pools` "both"), `free_swa` ("swa") or `free_full` ("full") of these full slots."""

    slots: tuple[int, ...]
    pools: str = "both"


@dataclass(frozen=True)
class FreeSegments:
    """Row segments of one request released: segment i is `counts[i]` slots (taken in order
    from `slots`) from position `starts[i]`; `free_segments` / `free_full_segments` ("full"),
    one segment `free_segment` / `free_swa_segment` ("swa") / `free_full_segment`."""

    slots: tuple[int, ...]
    starts: tuple[int, ...]
    counts: tuple[int, ...]
    pools: str = "both"

    def segments(self) -> list[tuple[list[int], int]]:
        out, at = [], 0
        for start, count in zip(self.starts, self.counts):
            out.append((list(self.slots[at:at + count]), start))
            at += count
        return out


@dataclass(frozen=True)
class SetMapping:
    """`set_full_to_swa_mapping(full, swa)`: the prefix cache re-pairs full slots it keeps
    with SWA slots it already holds."""

    full: tuple[int, ...]
    swa: tuple[int, ...]


@dataclass(frozen=True)
class ClearMapping:
    """`clear_full_to_swa_mapping(full)`: those full slots keep no SWA peer."""

    full: tuple[int, ...]


BY_SLOT = (AllocSlots, ExtendSlots, ExtendTailSlots, DecodeSlots, FreeSlots, FreeSegments,
           SetMapping, ClearMapping)
SCHEDULER_OPS = (Cache, Reclaim, Resize, Offload, Misuse)
Op = (Admit | Extend | ExtendTail | Decode | Evict | Finish | GroupBegin | GroupEnd | Clear
      | Cache | Reclaim | Resize | Offload | Misuse
      | AllocSlots | ExtendSlots | ExtendTailSlots | DecodeSlots | FreeSlots | FreeSegments
      | SetMapping | ClearMapping)
KINDS = {"admit": Admit, "extend": Extend, "extend_tail": ExtendTail, "decode": Decode,
         "evict": Evict, "finish": Finish, "group_begin": GroupBegin, "group_end": GroupEnd,
         "clear": Clear, "cache": Cache, "reclaim": Reclaim, "resize": Resize,
         "offload": Offload, "misuse": Misuse, "alloc_slots": AllocSlots,
         "extend_slots": ExtendSlots,
         "extend_tail_slots": ExtendTailSlots, "decode_slots": DecodeSlots,
         "free_slots": FreeSlots, "free_segments": FreeSegments, "set_mapping": SetMapping,
         "clear_mapping": ClearMapping}
# "full_pool" / "swa_pool": a release on one of the allocator's own pools, reached past it
# (`allocator.full_attn_allocator.free_segment(...)`, as SGLang's unified radix cache frees a
# tree value's full slots): that pool's own free, the mapping untouched; "swa_pool" names SWA
# slots.
POOLS = ("both", "swa", "full", "full_pool", "swa_pool")
# The release a by-slot op stands for, by (pools, segments): the model's and drivers' method.
RELEASES = {("both", False): "free", ("swa", False): "free_swa", ("full", False): "free_full",
            ("both", True): "free_segments", ("swa", True): "free_swa_segments",
            ("full", True): "free_full_segments", ("full_pool", False): "full_pool_free",
            ("full_pool", True): "full_pool_free_segments", ("swa_pool", False): "swa_pool_free",
            ("swa_pool", True): "swa_pool_free_segments"}
POOL_OWNERS = {"full_pool": "full_attn_allocator", "swa_pool": "swa_attn_allocator"}
NAMES = {cls: name for name, cls in KINDS.items()}


@dataclass(frozen=True)
class Trace:
    """`cls(size, size_swa, page_size, dtype, device, kvcache, need_sort)` driven by `ops`, with
    SGLang's debug checks on (`debug`: SGLANG_DEBUG_MEMORY_POOL, read when the pools are built)
    and its invariant checks at their strict level (`strict`: SGLANG_INVARIANT_CHECK, as its
    CI runs), or off."""

    page_size: int
    size: int
    size_swa: int
    need_sort: bool
    ops: tuple[Op, ...]
    debug: bool = False
    strict: bool = False
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)

    def trace_id(self) -> str:
        return document_id(to_json(self))

    def describe(self) -> str:
        flags = "".join(f", {name}" for name in ("need_sort", "debug", "strict")
                        if getattr(self, name))
        return (f"page_size {self.page_size}, {self.size} full + {self.size_swa} SWA tokens"
                f"{flags}, {len(self.ops)} ops")


def unchecked_decodes(trace: Trace) -> bool:
    """Whether a decode may run with a pool short (only calls at page size >= 2 can differ)."""
    return trace.page_size > 1 and any(isinstance(op, Decode) and not op.checked
                                       for op in trace.ops)


def describe_op(op: Op) -> str:
    if isinstance(op, Admit):
        return f"admit r{op.rid}"
    if isinstance(op, Extend):
        return "extend " + " ".join(f"r{r}+{n}" for r, n in zip(op.rids, op.lens))
    if isinstance(op, ExtendTail):
        return f"extend r{op.rid}+{op.len} with an SWA tail of {op.tail}"
    if isinstance(op, Decode):
        who = " ".join(f"r{r}" for r in op.rids) or "all"
        return f"decode {who}" + ("" if op.checked else " (unchecked)")
    if isinstance(op, Evict):
        return f"evict r{op.rid} window keeping {op.keep} ({op.how})"
    if isinstance(op, Finish):
        return f"finish r{op.rid} ({op.how})"
    if isinstance(op, BY_SLOT):
        return describe_slot_op(op)
    if isinstance(op, SCHEDULER_OPS):
        return scheduler_ops.describe(op)
    return NAMES[type(op)].replace("_", " ")


def describe_slot_op(op: Op) -> str:
    """One line for a by-slot op, in the call's own terms."""
    if isinstance(op, AllocSlots):
        return f"alloc({op.need_size})"
    if isinstance(op, ExtendSlots):
        return (f"alloc_extend(prefix_lens={few(op.prefix_lens)}, seq_lens={few(op.seq_lens)}"
                f", last_loc={few(op.last_loc)})")
    if isinstance(op, ExtendTailSlots):
        return (f"alloc_extend_swa_tail(prefix_lens=[{op.prefix_len}], seq_lens=[{op.seq_len}]"
                f", last_loc=[{op.last_loc}], swa_tail_len={op.tail})")
    if isinstance(op, DecodeSlots):
        return f"alloc_decode(seq_lens={few(op.seq_lens)}, last_loc={few(op.last_loc)})"
    if isinstance(op, FreeSlots):
        if op.pools in POOL_OWNERS:
            return f"{POOL_OWNERS[op.pools]}.free({len(op.slots)} slots {few(op.slots)})"
        return f"{RELEASES[op.pools, False]}({len(op.slots)} slots {few(op.slots)})"
    if isinstance(op, FreeSegments):
        if len(op.starts) == 1:
            name = {"both": "free_segment", "swa": "free_swa_segment",
                    "full": "free_full_segment"}.get(op.pools) or \
                f"{POOL_OWNERS[op.pools]}.free_segment"
            return f"{name}({len(op.slots)} slots {few(op.slots)}, start_pos={op.starts[0]})"
        name = f"{POOL_OWNERS[op.pools]}.free_segments" if op.pools in POOL_OWNERS else \
            RELEASES[op.pools, True]
        return f"{name}({len(op.starts)} segments from {few(op.starts)}, {len(op.slots)} slots)"
    if isinstance(op, SetMapping):
        return f"set_full_to_swa_mapping({few(op.full)}, {few(op.swa)})"
    return f"clear_full_to_swa_mapping({few(op.full)})"


def to_json(trace: Trace) -> dict:
    # The checks' switches only where on: a trace without them keeps its content id.
    checks = {name: True for name in ("debug", "strict") if getattr(trace, name)}
    return {"format": FORMAT, "page_size": trace.page_size, "size": trace.size,
            "size_swa": trace.size_swa, "need_sort": trace.need_sort, **checks,
            "ops": [dataclass_op_to_json(op, NAMES[type(op)]) for op in trace.ops],
            **provenance(trace)}
