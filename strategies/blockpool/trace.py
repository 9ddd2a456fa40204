"""The block-pool trace: what vLLM's KV-cache manager asks of its `BlockPool` (vllm 0.33.0,
`vllm/v1/core/block_pool.py`), as a sequence of ops, and its version-stable JSON form
("kvfuzz-blockpool-trace/1"). Standard library only.

Ops name holders by id (`rid`): a holder is what a request is to the pool, an ordered list of
the blocks it references (null blocks included, as a sliding-window table has them) and how many
of its leading blocks are cached (`cached`). Holders resolve at run time, so a trace stays valid
when a shrinker drops ops: an op whose holder is not live (or already is, for one that creates
it) resolves to nothing. Block hashes are small ints standing for vLLM's chained block hashes,
one per `hash_block_size` tokens (a request's `block_hashes`): block i of `scale` hash units
has the hash of its last unit, `hashes[(i + 1) * scale - 1]`; the harness turns them into
bytes. A request's tokens, which KV events carry, are its hashes, each `hash_block_size` times.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.strategies.inputs import (LATER, Origin, dataclass_op_to_json, document_id,
                                      provenance)

FORMAT = "kvfuzz-blockpool-trace/1"


@dataclass(frozen=True)
class Alloc:
    """`get_new_blocks(n)` for holder `rid` (created if new), n = `count`, or with `relative`
    the free blocks + `count` (so that n == free and n == free + 1 are reachable)."""

    rid: int
    count: int
    relative: bool = False


@dataclass(frozen=True)
class Lookup:
    """A prefix hit for a new holder: `get_cached_block(h, [group])` for each block's hash in
    order up to the first miss (with `scale` > 1 then, as full attention does, the unit
    boundaries inside the next block, latest first, up to the first hit: a partial hit), then
    `touch` of the hits; the holder starts with them, its full ones counted cached. In a trace
    with `report`, the hit is then reported as KV events (`emit_cached_block_events`, as the
    manager does for a request whose kv_cache_report_mode is "full")."""

    rid: int
    hashes: tuple[int, ...]
    group: int = 0


@dataclass(frozen=True)
class Share:
    """A new holder `rid` takes the first `count` cached blocks of holder `src` (`touch`)."""

    rid: int
    src: int
    count: int


@dataclass(frozen=True)
class Pad:
    """`count` null blocks appended to holder `rid`'s table (a sliding-window table's skipped
    blocks); no call: they go into the pool's later calls with the rest."""

    rid: int
    count: int


@dataclass(frozen=True)
class Cache:
    """`cache_full_blocks` of holder `rid`'s blocks from its cached count up to its full blocks
    (min(blocks, len(hashes) // scale)), with `hashes` as the request's block hashes, under
    `group`; the positions in `skip` (counted from the cached count) masked out, as a sparse
    retention group masks the blocks no later hit can use (`block_mask`)."""

    rid: int
    hashes: tuple[int, ...]
    group: int = 0
    skip: tuple[int, ...] = field(default=(), metadata=LATER)


@dataclass(frozen=True)
class CachePartial:
    """`cache_partial_block` of holder `rid`'s block that holds token `units * hash_block_size
    - 1`: a prefix-cache entry for the first `units` hash units of `hashes`, as full attention
    registers a prompt tail that ends inside a block; `replace`: the block's contents were
    replaced, so its entries go first. Resolves to nothing without prefix caching, beyond the
    holder's blocks or its hashes."""

    rid: int
    units: int
    hashes: tuple[int, ...]
    group: int = 0
    replace: bool = False


@dataclass(frozen=True)
class Move:
    """Copy-on-write of holder `rid`'s block `index`: a new holder `dst` gets one new block
    (`get_new_blocks(1)`) and the block's prefix-cache entries move to it (`move_block_hashes`),
    as a request that keeps writing into a cached block leaves the cache a private copy.
    Resolves to nothing on a null block, or when no block is free."""

    rid: int
    index: int
    dst: int


@dataclass(frozen=True)
class Free:
    """One `free_blocks` of every live holder of `rids`, each holder's blocks in reverse order
    (`reverse`, as the manager frees: tail blocks evicted first) or in table order."""

    rids: tuple[int, ...]
    reverse: bool = True


@dataclass(frozen=True)
class Pin:
    """`touch` of holder `rid`'s non-null blocks once more, as a connector pins a request's
    blocks for a transfer (vLLM's CPU offloading): the holder's free or unpin then releases
    each of them twice in one call, once per reference."""

    rid: int


@dataclass(frozen=True)
class DoubleFree:
    """A caller's bug: `free_blocks` of holder `rid`'s blocks (tail first) and its tail block
    once more than it has references (vLLM #42571: an offload list naming a block twice). A pool
    must refuse it and change nothing (`profile.py`: vLLM's does not check, and declares it).
    Resolves to nothing where that block is shared: its extra entry would be another holder's
    reference, a legal free."""

    rid: int


@dataclass(frozen=True)
class Unpin:
    """One `unpin_blocks` of the non-null blocks of every live holder of `rids`, with a reuse
    watcher: the blocks count as free but are last to go, and the watcher hears of each reuse."""

    rids: tuple[int, ...]


@dataclass(frozen=True)
class Evict:
    """`evict_blocks(set(block_ids))`: ids outside the pool are dropped at run time."""

    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class Probe:
    """`get_cached_block(h, groups)` for each hash: a read, nothing changes."""

    hashes: tuple[int, ...]
    groups: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class Reset:
    """`reset_prefix_cache()`: refused (False) while any block is held."""


# The pool's own calls, by block id: what a live guard sees (`kvfuzz.guard(pool, "blockpool")`:
# the engine's calls name blocks, not holders). Ids outside the pool are dropped at run time.
@dataclass(frozen=True)
class TouchIds:
    """`touch` of these blocks, in order: one more reference each."""

    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class FreeIds:
    """`free_blocks` of these blocks, in the order given (the eviction order the caller chose)."""

    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class UnpinIds:
    """`unpin_blocks` of these blocks (the null block dropped), with a reuse watcher."""

    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class CacheIds:
    """`cache_full_blocks` of these blocks under `group`: block i gets `hashes[i]`, except the
    positions in `skip` (the caller's block mask: blocks no hit can use); they are blocks
    `first`, `first` + 1, ... of their request (an entry covers the tokens up to its block's
    end). Resolves to nothing when a block it would cache is cached already."""

    block_ids: tuple[int, ...]
    hashes: tuple[int, ...]
    group: int = 0
    skip: tuple[int, ...] = ()
    first: int = field(default=0, metadata=LATER)


Op = Alloc | Lookup | Share | Pad | Cache | CachePartial | Move | Free | Pin | DoubleFree | \
    Unpin | Evict | Probe | Reset | TouchIds | FreeIds | UnpinIds | CacheIds
KINDS = {"alloc": Alloc, "lookup": Lookup, "share": Share, "pad": Pad, "cache": Cache,
         "cache_partial": CachePartial, "move": Move, "free": Free, "pin": Pin,
         "double_free": DoubleFree, "unpin": Unpin, "evict": Evict, "probe": Probe, "reset": Reset,
         "touch_ids": TouchIds, "free_ids": FreeIds, "unpin_ids": UnpinIds,
         "cache_ids": CacheIds}
NAMES = {cls: name for name, cls in KINDS.items()}
CREATES = (Alloc, Lookup, Share, Pad, Move)  # ops that may start a holder


@dataclass(frozen=True)
class Trace:
    """`BlockPool(num_gpu_blocks=blocks, enable_caching=caching, hash_block_size=...,
    enable_kv_cache_events=events, num_hash_lookahead_tokens=lookahead)` driven by `ops`, its
    blocks of `scale` hash units (the manager's block size, a multiple of the hash block size).
    Block 0 is the pool's null block. `salt`: requests carry a cache salt (a KV event's extra
    key of block 0); `images`: multimodal inputs every request has, (token offset, length)
    (extra keys of the blocks they overlap); `report`: prefix hits are reported as KV events;
    `metrics`: a residency metrics collector that samples every block."""

    blocks: int
    caching: bool
    ops: tuple[Op, ...]
    hash_block_size: int = 16
    scale: int = 1
    events: bool = False
    lookahead: int = 0
    salt: bool = False
    report: bool = False
    images: tuple[tuple[int, int], ...] = ()
    metrics: bool = False
    origin: Origin | None = field(default=None, compare=False)
    note: str = field(default="", compare=False)

    @property
    def block_size(self) -> int:
        return self.scale * self.hash_block_size

    def trace_id(self) -> str:
        return document_id(to_json(self))

    def describe(self) -> str:
        settings = [f"blocks of {self.scale} x {self.hash_block_size} tokens"] \
            if self.scale > 1 or self.hash_block_size != 16 else []
        settings += ["KV events"] if self.events else []
        settings += [f"{self.lookahead} lookahead tokens"] if self.lookahead else []
        settings += ["cache salt"] if self.salt else []
        settings += ["hits reported"] if self.report else []
        settings += [f"{len(self.images)} images"] if self.images else []
        settings += ["residency metrics"] if self.metrics else []
        return (f"{self.blocks} blocks (null block 0), caching "
                f"{'on' if self.caching else 'off'}, {', '.join(settings + [''])}"
                f"{len(self.ops)} ops")


def _ids(values) -> str:
    return " ".join(str(v) for v in values) or "-"


def describe_op(op: Op) -> str:
    if isinstance(op, Alloc):
        n = f"free{op.count:+d}" if op.relative else str(op.count)
        return f"alloc {n} blocks for r{op.rid}"
    if isinstance(op, Lookup):
        return f"lookup r{op.rid} hashes [{_ids(op.hashes)}] group {op.group}"
    if isinstance(op, Share):
        return f"r{op.rid} shares {op.count} cached blocks of r{op.src}"
    if isinstance(op, Pad):
        return f"pad r{op.rid} with {op.count} null blocks"
    if isinstance(op, Cache):
        skip = f" skip [{_ids(op.skip)}]" if op.skip else ""
        return f"cache r{op.rid} hashes [{_ids(op.hashes)}] group {op.group}{skip}"
    if isinstance(op, CachePartial):
        return (f"cache r{op.rid}'s first {op.units} hash units of [{_ids(op.hashes)}] as a "
                f"partial block, group {op.group}{', replacing' if op.replace else ''}")
    if isinstance(op, Move):
        return f"move r{op.rid}'s block {op.index} entries to a new block of r{op.dst}"
    if isinstance(op, Free):
        return f"free {' '.join(f'r{r}' for r in op.rids)}" + ("" if op.reverse else " in order")
    if isinstance(op, Pin):
        return f"pin r{op.rid}'s blocks (one more reference each)"
    if isinstance(op, DoubleFree):
        return f"free r{op.rid} with its tail block once too often (a double free)"
    if isinstance(op, Unpin):
        return f"unpin {' '.join(f'r{r}' for r in op.rids)}"
    if isinstance(op, Evict):
        return f"evict blocks {_ids(op.block_ids)}"
    if isinstance(op, Probe):
        return f"probe hashes [{_ids(op.hashes)}] groups {list(op.groups)}"
    if isinstance(op, TouchIds):
        return f"touch blocks {_ids(op.block_ids)}"
    if isinstance(op, FreeIds):
        return f"free blocks {_ids(op.block_ids)}"
    if isinstance(op, UnpinIds):
        return f"unpin blocks {_ids(op.block_ids)}"
    if isinstance(op, CacheIds):
        skip = f" skip [{_ids(op.skip)}]" if op.skip else ""
        at = f" from block {op.first}" if op.first else ""
        return (f"cache blocks {_ids(op.block_ids)} as [{_ids(op.hashes)}] group {op.group}"
                f"{at}{skip}")
    return "reset prefix cache"


SETTINGS = {"hash_block_size": 16, "scale": 1, "events": False, "lookahead": 0, "salt": False,
            "report": False, "images": (), "metrics": False}


def to_json(trace: Trace) -> dict:
    """The trace's JSON; a setting at its default is left out (a file without it reads as
    before)."""
    settings = {name: getattr(trace, name) for name, default in SETTINGS.items()
                if getattr(trace, name) != default}
    if "images" in settings:
        settings["images"] = [list(image) for image in trace.images]
    return {"format": FORMAT, "blocks": trace.blocks, "caching": trace.caching, **settings,
            "ops": [dataclass_op_to_json(op, NAMES[type(op)]) for op in trace.ops],
            **provenance(trace)}
