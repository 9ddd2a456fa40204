"""The compaction `Trace`: operations over an up and a down pool sharing one byte buffer, its
version-stable JSON form (read back by `codec`), and the plain-value `PoolSnapshot` both oracle
and implementation report.

Standard library only. Ops name pages by selectors (`Pick`) resolved against the live pages at
run time, so every op stays valid when a trace is shrunk or edited by hand.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import Origin, document_id, provenance

FORMAT = "kvfuzz-compaction-trace/1"
POOLS = ("up", "down")
WHERE = ("top", "bottom", "middle", "random", "all")  # top = the pages nearest the frontier
WHICH = ("oldest", "newest", "all")                   # which unfired event a Fire completes
HELD = ("oldest", "newest")                           # which reservation a Release gives back


@dataclass(frozen=True)
class Params:
    """Geometry of the shared buffer (spec §8.2), in pages: compaction is page-level.
    `page_size`: tokens per page. The tables, holes and frontiers stay page-granular at any page
    size; what it changes is the calls SGLang's class takes and returns in tokens (alloc, free,
    the load-back reservation: `oracle/compaction/tokens.py`). Added in version 5 of the
    generator; left out of the JSON at 1, so a trace written before keeps its content id."""

    total_bytes: int = 256
    epp_up: int = 8
    epp_down: int = 8
    sink_bytes: int = 8
    two_ended: bool = True
    move_cap: int = 2
    page_size: int = 1

    def pools(self) -> tuple[str, ...]:
        return POOLS if self.two_ended else POOLS[:1]


@dataclass(frozen=True)
class Pick:
    """`n` live pages of one pool chosen by position in depth order (base first, frontier last)."""

    where: str = "top"
    n: int = 1
    salt: int = 0

    def resolve(self, by_depth: list[int]) -> list[int]:
        """The chosen vids, from the pool's live vids ordered base first; never a duplicate."""
        n = len(by_depth) if self.where == "all" else min(self.n, len(by_depth))
        if self.where in ("top", "all"):
            return by_depth[len(by_depth) - n:]
        if self.where == "bottom":
            return by_depth[:n]
        if self.where == "middle":
            start = (len(by_depth) - n) // 2
            return by_depth[start:start + n]
        return random.Random(f"pick:{self.salt}").sample(by_depth, n)


@dataclass(frozen=True)
class Alloc:
    """Allocate `n` pages; if `relative`, `n` is added to the pool's `avail()` (n=+1 overshoots)."""

    pool: str
    n: int
    relative: bool = False


@dataclass(frozen=True)
class Free:
    """Free the picked live pages of the pool."""

    pool: str
    pick: Pick


@dataclass(frozen=True)
class _Urgency:
    pool: str
    urgent: bool


@dataclass(frozen=True)
class Flush(_Urgency):
    """Compact the pool (spec §3.6); non-urgent flushes move at most `move_cap` pages."""


@dataclass(frozen=True)
class Drain(_Urgency):
    """Pending batches whose event fired (all, if urgent) become holes again (§3.8)."""


@dataclass(frozen=True)
class Forward:
    """Launch a forward: a new unfired event, writing the picked pages of each pool (None: none)."""

    up: Pick | None = None
    down: Pick | None = None


@dataclass(frozen=True)
class Fire:
    which: str = "oldest"


@dataclass(frozen=True)
class Clear:
    """Reset a pool (None: every pool, as SGLang's composite allocators do on a cache flush) to
    its initial state: every page free, no hole, nothing pending, no forward in flight."""

    pool: str | None = None


@dataclass(frozen=True)
class GroupBegin:
    """Open a free group on the pool (SGLang's `free_group_begin`): its frees are deferred to the
    group's end. One at a time: a second begin while one is open is refused (the released class
    asserts) and changes nothing."""

    pool: str


@dataclass(frozen=True)
class GroupEnd:
    """Close the pool's free group (`free_group_end`): what its frees named is freed now, in one
    free, in the order they came. With no group open (never begun, or forgotten by a `clear`)
    it does nothing."""

    pool: str


@dataclass(frozen=True)
class Reserve:
    """HiCache's load-back reservation (SGLang's `alloc_physical`): `n` pages taken as an
    allocation takes them (holes first, then the frontier; the same shortfall ladder) but bound
    to no vid, handed to no one else until given back; while one is held the pool moves no
    page (the queued copy carries their physical ids). `relative`: `n` is added to the pool's
    `avail()`, as for `Alloc`. Binding them into the tree and queueing the copy (a non-owner
    SWA pool's, on the full pool's vids) is not modelled: this trace's pools own their vids."""

    pool: str
    n: int
    relative: bool = False


@dataclass(frozen=True)
class Release:
    """Roll one reservation of the pool back ("oldest" or "newest"; none held: nothing), as
    HiCache does when a load-back cannot go ahead (`cancel_physical_reservation`): its pages
    become holes, and the pool may move pages again once none is held."""

    pool: str
    which: str = "oldest"


Op = (Alloc | Free | Flush | Drain | Forward | Fire | Clear | GroupBegin | GroupEnd | Reserve
      | Release)
KINDS = {"alloc": Alloc, "free": Free, "flush": Flush, "drain": Drain, "forward": Forward,
          "fire": Fire, "clear": Clear, "group_begin": GroupBegin, "group_end": GroupEnd,
          "reserve": Reserve, "release": Release}
NAMES = {cls: name for name, cls in KINDS.items()}


@dataclass(frozen=True)
class Trace:
    params: Params
    ops: tuple[Op, ...]
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)  # provenance, e.g. "shrunk from 300 ops"

    def trace_id(self) -> str:
        """A short hash of params and ops: names corpus files, independent of provenance."""
        return document_id(to_json(self))


@dataclass(frozen=True)
class PoolSnapshot:
    """Everything observable about one pool, as plain values, compared field by field."""

    wm: int
    live: int
    avail: int
    num_moves: int
    holes: tuple[int, ...]                             # sorted
    pending: tuple[tuple[int, tuple[int, ...]], ...]   # (event id, sorted pages), by event id
    pending_set: tuple[int, ...]                       # the host mirror, sorted
    inflight: tuple[int, ...]                          # write-set vids of an unfired forward
    free_vids: tuple[int, ...]                         # FIFO order
    v2p: tuple[int, ...]
    p2v: tuple[int, ...]
    # The vids freed inside the pool's open free group, in order (their frees deferred to its
    # end); None: no group open. Defaulted, so a side that has no free groups need not say.
    group: tuple[int, ...] | None = None
    # HiCache load-back reservations: the pages held (sorted), and how many pages wait for
    # their load (SGLang's `_pending_hicache_load_pages`: while above 0 no page moves).
    # Defaulted, so a side without reservations need not say.
    reserved: tuple[int, ...] = ()
    loading: int = 0


def describe_op(op: Op) -> str:
    """One line, e.g. `free up top 3` or `forward up=random 2 (salt 7), down=-`."""
    if isinstance(op, Alloc):
        return f"alloc {op.pool} {'avail' + format(op.n, '+d') if op.relative else op.n}"
    if isinstance(op, Free):
        return f"free {op.pool} {_describe_pick(op.pick)}"
    if isinstance(op, (Flush, Drain)):
        return f"{NAMES[type(op)]} {op.pool} {'urgent' if op.urgent else 'non-urgent'}"
    if isinstance(op, Forward):
        return f"forward up={_describe_pick(op.up)}, down={_describe_pick(op.down)}"
    if isinstance(op, Clear):
        return f"clear {op.pool or 'all'}"
    if isinstance(op, (GroupBegin, GroupEnd)):
        return f"free_{NAMES[type(op)]} {op.pool}"
    if isinstance(op, Reserve):
        return f"reserve {op.pool} {'avail' + format(op.n, '+d') if op.relative else op.n}"
    if isinstance(op, Release):
        return f"release {op.pool} {op.which}"
    return f"fire {op.which}"


def _describe_pick(pick: Pick | None) -> str:
    if pick is None:
        return "-"
    if pick.where == "all":
        return "all"
    return f"{pick.where} {pick.n}" + (f" (salt {pick.salt})" if pick.where == "random" else "")


# --- JSON -----------------------------------------------------------------------------------

def to_json(trace: Trace) -> dict:
    params = dict(vars(trace.params))
    if params["page_size"] == 1:  # as written before page sizes: the same content id
        del params["page_size"]
    return {"format": FORMAT, "params": params,
            "ops": [_op_to_json(op) for op in trace.ops], **provenance(trace)}


def _op_to_json(op: Op) -> dict:
    data = {"op": NAMES[type(op)]}
    for name, value in vars(op).items():
        data[name] = dict(vars(value)) if isinstance(value, Pick) else value
    return data
