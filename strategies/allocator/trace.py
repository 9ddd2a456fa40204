"""The allocator `Trace`: a scheduler's operations over requests against one paged allocator, and
its version-stable JSON form ("kvfuzz-allocator-trace/1"). Standard library only.

Ops name requests by id (`rid`); the harness resolves them at run time against the requests that are
live then, so a trace stays valid when a shrinker drops ops or requests."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import (Origin, dataclass_op_to_json, document_id, few,
                                      provenance)

FORMAT = "kvfuzz-allocator-trace/1"
FREE_HOWS = ("free", "segment", "page_ids")  # which allocator call releases the pages
# Caller bugs the debug checks reject (oracle.allocator says how), and misuse of the free-group
# protocol, whose verdict holds in every mode: a nested begin is rejected, an end without a
# begin does nothing. (A `Clear` inside a group needs no kind: it clears and closes the group.)
MISUSES = ("double_free", "free_page0", "bad_last_loc", "free_unallocated", "free_out_of_range",
           "alloc_unaligned", "segment_gapped")
GROUP_MISUSES = ("group_begin_nested", "group_end_unopened")
# Checked in every mode too: `free_segment` asserts that its start is page-aligned before it
# changes anything (a start inside a page would free every page-th slot from there, not pages).
SEGMENT_MISUSES = ("segment_unaligned",)
ALL_MISUSES = MISUSES + GROUP_MISUSES + SEGMENT_MISUSES
INTERFACES = ("paged", "token")  # alloc_extend/alloc_decode, or alloc(n) alone (page size 1)


@dataclass(frozen=True)
class Admit:
    """A new request; with `share_from`, it starts with that live request's first `share_pages`
    full pages as its prefix (a radix-cache hit), holding them jointly."""

    rid: int
    share_from: int | None = None
    share_pages: int = 0


@dataclass(frozen=True)
class Extend:
    """One batched `alloc_extend`: request `rids[i]` grows by `lens[i]` tokens. With `fill`, the
    last request's length is chosen at run time so the batch needs exactly `available pages +
    fill` new pages (minus `trim` tokens off its last page). `exact`: the caller passes
    `num_new_pages`."""

    rids: tuple[int, ...]
    lens: tuple[int, ...]
    fill: int | None = None
    trim: int = 0
    exact: bool = False


@dataclass(frozen=True)
class Decode:
    """One batched `alloc_decode`: one token for each of `rids` (empty: every live request)."""

    rids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Finish:
    """The request ends; the pages no other request holds are released by `how`."""

    rid: int
    how: str = "free"


@dataclass(frozen=True)
class Truncate:
    """Release the request's tail from the page boundary at or below `keep` tokens."""

    rid: int
    keep: int
    how: str = "segment"


@dataclass(frozen=True)
class GroupBegin:
    """`free_group_begin()`: releases are held until the group ends."""


@dataclass(frozen=True)
class GroupEnd:
    """`free_group_end()`: everything released in the group goes back at once."""


@dataclass(frozen=True)
class Clear:
    """`clear()`: every page free again, every request gone."""


@dataclass(frozen=True)
class Misuse:
    """A caller bug on purpose (see `oracle.allocator` for the verdict); `salt` picks the target."""

    kind: str
    salt: int = 0


@dataclass(frozen=True)
class AllocPages:
    """`alloc(pages * P)` for a new holder `rid`; `relative`: pages = available pages + `pages`."""

    rid: int
    pages: int
    relative: bool = False


# The allocator's own calls, by slot: what a live guard sees (`kvfuzz.guard(allocator,
# "allocator")`: an engine's calls carry lengths and slots, not requests). The pages they hand
# out are held by "the engine" until a release of them; nothing resolves them away but a
# batch outside the contract (a seq_len below its prefix_len).
@dataclass(frozen=True)
class AllocSlots:
    """`alloc(need_size)`."""

    need_size: int


@dataclass(frozen=True)
class ExtendSlots:
    """`alloc_extend` of this batch (`num_new_pages` passed when not None)."""

    prefix_lens: tuple[int, ...]
    seq_lens: tuple[int, ...]
    last_loc: tuple[int, ...]
    num_new_pages: int | None = None


@dataclass(frozen=True)
class DecodeSlots:
    """`alloc_decode` of this batch."""

    seq_lens: tuple[int, ...]
    last_loc: tuple[int, ...]


@dataclass(frozen=True)
class FreeSlots:
    """`free(slots)`."""

    slots: tuple[int, ...]


@dataclass(frozen=True)
class FreeSegments:
    """`free_segments` of one request's row segments: segment i is `counts[i]` slots (taken in
    order from `slots`) from position `starts[i]`; one segment is `free_segment`."""

    slots: tuple[int, ...]
    starts: tuple[int, ...]
    counts: tuple[int, ...]


@dataclass(frozen=True)
class FreePages:
    """`free_page_ids(page_ids)`."""

    page_ids: tuple[int, ...]


BY_SLOT = (AllocSlots, ExtendSlots, DecodeSlots, FreeSlots, FreeSegments, FreePages)
Op = (Admit | Extend | Decode | Finish | Truncate | GroupBegin | GroupEnd | AllocPages | Clear
      | Misuse | AllocSlots | ExtendSlots | DecodeSlots | FreeSlots | FreeSegments | FreePages)
KINDS = {"admit": Admit, "extend": Extend, "decode": Decode, "finish": Finish,
         "truncate": Truncate, "group_begin": GroupBegin, "group_end": GroupEnd,
         "alloc": AllocPages, "clear": Clear, "misuse": Misuse, "alloc_slots": AllocSlots,
         "extend_slots": ExtendSlots, "decode_slots": DecodeSlots, "free_slots": FreeSlots,
         "free_segments": FreeSegments, "free_pages": FreePages}
NAMES = {cls: name for name, cls in KINDS.items()}


@dataclass(frozen=True)
class Trace:
    """Allocator `PagedAllocator(size, page_size, need_sort=...)`, debug checks on if `debug`.
    `interface` "token": the class of upstream `TokenToKVPoolAllocator` (page size 1), which a
    scheduler drives with `alloc(n)` alone and which appends what is freed to its free list."""

    page_size: int
    size: int
    need_sort: bool
    ops: tuple[Op, ...]
    debug: bool = False
    interface: str = "paged"
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)  # provenance, e.g. "shrunk from ..."

    @property
    def num_pages(self) -> int:
        return self.size // self.page_size

    def trace_id(self) -> str:
        """A short hash of the content (never the provenance): names corpus files."""
        return document_id(to_json(self))

    def describe(self) -> str:
        kind = "token allocator, " if self.interface == "token" else ""
        return (f"{kind}size {self.size} ({self.num_pages} pages of {self.page_size}), need_sort "
                f"{'on' if self.need_sort else 'off'}, debug {'on' if self.debug else 'off'}, "
                f"{len(self.ops)} ops")


def describe_op(op: Op) -> str:
    """One line, e.g. `extend r3+5 r4+0 (fill +1)` or `finish r2 (segment)`."""
    if isinstance(op, Admit):
        share = f" sharing {op.share_pages} pages of r{op.share_from}" \
            if op.share_from is not None else ""
        return f"admit r{op.rid}{share}"
    if isinstance(op, Extend):
        text = "extend " + " ".join(f"r{r}+{n}" for r, n in zip(op.rids, op.lens))
        if op.fill is not None:
            text += f" (last fills to available{op.fill:+d} pages, trim {op.trim})"
        return text + (" exact" if op.exact else "")
    if isinstance(op, Decode):
        return "decode " + (" ".join(f"r{r}" for r in op.rids) or "all")
    if isinstance(op, Finish):
        return f"finish r{op.rid} ({op.how})"
    if isinstance(op, Truncate):
        return f"truncate r{op.rid} to {op.keep} ({op.how})"
    if isinstance(op, AllocPages):
        pages = f"available{op.pages:+d}" if op.relative else str(op.pages)
        return f"alloc {pages} pages for r{op.rid}"
    if isinstance(op, Misuse):
        return f"misuse {op.kind} (salt {op.salt})"
    if isinstance(op, BY_SLOT):
        return describe_slot_op(op)
    return NAMES[type(op)].replace("_", " ")


def describe_slot_op(op: Op) -> str:
    """One line for a by-slot op, in the call's own terms."""
    if isinstance(op, AllocSlots):
        return f"alloc({op.need_size})"
    if isinstance(op, ExtendSlots):
        exact = "" if op.num_new_pages is None else f", num_new_pages={op.num_new_pages}"
        return (f"alloc_extend(prefix_lens={few(op.prefix_lens)}, seq_lens={few(op.seq_lens)}"
                f", last_loc={few(op.last_loc)}{exact})")
    if isinstance(op, DecodeSlots):
        return f"alloc_decode(seq_lens={few(op.seq_lens)}, last_loc={few(op.last_loc)})"
    if isinstance(op, FreeSlots):
        return f"free({len(op.slots)} slots {few(op.slots)})"
    if isinstance(op, FreeSegments):
        return (f"free_segments({len(op.starts)} segments from {few(op.starts)}, "
                f"{len(op.slots)} slots)")
    return f"free_page_ids({few(op.page_ids)})"


# --- JSON (decoding and validation: strategies.allocator.codec) -------------------------------

def to_json(trace: Trace) -> dict:
    # "interface" is written only when not "paged", so older files keep their content ids.
    interface = {"interface": trace.interface} if trace.interface != "paged" else {}
    return {"format": FORMAT, "page_size": trace.page_size, "size": trace.size,
            "need_sort": trace.need_sort, "debug": trace.debug, **interface,
            "ops": [_op_to_json(op) for op in trace.ops], **provenance(trace)}


def _op_to_json(op: Op) -> dict:
    return dataclass_op_to_json(op, NAMES[type(op)])
