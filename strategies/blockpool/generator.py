"""Seeded scheduler-like block-pool traces (`blockpool/4`): trace `index` of `seed` is the same
forever; a change to what this produces must bump the version (`blockpool/1` had no pins and no
double frees; `blockpool/2`, one profile; `blockpool/3`, no pool past 64 blocks).

Aimed where a block pool's bugs live: requests over a few prompt families (so prefix hits and
the same hash cached by two blocks are common), pools of 2 to 64 blocks (a few larger: below)
run to exactly full and one past it, blocks freed in the manager's reverse order or in table
order, cached blocks coming back from the free queue (`touch` of a block with no references),
null blocks in tables, reuse watchers (`unpin_blocks`), evictions of held and free blocks, and
resets with and without blocks held; since `blockpool/4`, one pool in fifty of 258 to 300
blocks, past CPython's cache of small ints, where an `is` between two block counts stops meaning
`==` (the free queue links its blocks by their count at construction); the same block twice in
one `free_blocks` call, once per reference (a pinned request), and, unless an implementation
declares its callers never do it (`generator_for`), a double free. Pools without prefix caching
get no cache ops (the manager makes none).

Each trace comes from one named profile (its `note` says which; the summary counts each
configuration, `config: ...`):
- "manager": the pool as a single-group manager with blocks of one hash unit uses it;
- "events": KV events published and checked call by call (with a cache salt, lookahead hashing
  and reported hits, each in some traces), blocks of one or two hash units;
- "partial": blocks of 2 to 4 hash units of 1 to 4 tokens, as groups of a larger block size see
  the pool: partial prefix hits inside a block, prompt tails registered as partial entries
  (`cache_partial_block`, sometimes replacing), promoted when their block fills, and copied out
  (`move_block_hashes`); KV events in half of them.
"""

from __future__ import annotations

import functools
import random

from kvfuzz.strategies.blockpool.profile import (NO_BOUNDARY, NO_LOOKAHEAD, NO_MASK, NO_MOVE,
                                                NO_REPLACE, NO_REPORT, NO_SCALE,
                                                double_frees_allowed, unpins_allowed)
from kvfuzz.strategies.blockpool.trace import (Alloc, Cache, CachePartial, DoubleFree, Evict,
                                               Free, Lookup, Move, Pad, Pin, Probe, Reset,
                                               Share, Trace, Unpin)
from kvfuzz.strategies.sources import TraceGenerator

PROFILES = {"manager": 0.5, "events": 0.25, "partial": 0.25}


def settings(rng: random.Random, profile: str) -> dict:
    """The pool's settings of a trace of `profile`."""
    if profile == "manager":
        return {}
    events = profile == "events" or rng.random() < 0.5
    size = rng.choice((1, 2, 4)) if profile == "partial" else rng.choice((2, 4, 16))
    return {"hash_block_size": size,
            "scale": rng.randint(2, 4) if profile == "partial" else rng.choice((1, 1, 2)),
            "events": events,
            "lookahead": rng.choice((0, 0, 1, 3)) if events else 0,
            "salt": events and rng.random() < 0.3,
            "report": events and rng.random() < 0.5,
            "images": images(rng, size) if events and rng.random() < 0.4 else (),
            "metrics": rng.random() < 0.3}


def images(rng: random.Random, size: int) -> tuple[tuple[int, int], ...]:
    """One to three multimodal inputs in a prompt's first blocks, some spanning blocks."""
    found, at = [], rng.randrange(2 * size)
    for _ in range(rng.randint(1, 3)):
        length = rng.randint(1, 3 * size)
        found.append((at, length))
        at += length + rng.randrange(2 * size)
    return tuple(found)


# What an earlier release's pool lacks (`profile.py`), by the tag its stream carries.
LACKS = {NO_REPLACE: "no-replace", NO_BOUNDARY: "no-boundary", NO_LOOKAHEAD: "no-lookahead",
         NO_MOVE: "no-move", NO_REPORT: "no-report", NO_SCALE: "no-scale", NO_MASK: "no-mask"}


LARGE_SHARE = 1 / 50
LARGE_MIN, LARGE_MAX = 258, 300  # block ids and counts past 256: fresh int objects


def build(rng: random.Random, num_ops: int, double_free: bool = True,
          unpin: bool = True, lacks: frozenset = frozenset()) -> Trace:
    profile = rng.choices(list(PROFILES), list(PROFILES.values()))[0]
    blocks = rng.choice((rng.randint(2, 8), rng.randint(8, 32), rng.randint(32, 64)))
    blocks = 1 if rng.random() < 0.04 else blocks  # the null block alone: nothing to hand out
    if rng.random() < LARGE_SHARE:  # each op compares every block: large pools are few
        blocks = rng.randint(LARGE_MIN, LARGE_MAX)
    caching = rng.random() < (0.85 if profile == "manager" else 0.95)
    chosen = settings(rng, profile)
    if NO_LOOKAHEAD in lacks and "lookahead" in chosen:  # drawn all the same: the rest of the
        chosen["lookahead"] = 0                           # trace is as in the usual stream
    if NO_REPORT in lacks and "report" in chosen:
        chosen["report"] = False
    if NO_SCALE in lacks and "scale" in chosen:
        chosen["scale"] = 1
    gen = _Generator(rng, blocks, caching, double_free, chosen.get("scale", 1),
                     profile == "partial", unpin, lacks)
    while len(gen.ops) < num_ops:
        gen.step()
    return Trace(blocks, caching, tuple(gen.ops[:num_ops]), **chosen, note=f"profile {profile}")


class _Generator:
    """Prompts are lists of hash units' contents (`scale` to a block); a unit's hash stands for
    its whole prefix (vLLM's chained hashes), so two prompts of a family share hashes up to
    where they part."""

    def __init__(self, rng: random.Random, blocks: int, caching: bool, double_free: bool,
                 scale: int, partial: bool, unpin: bool = True, lacks: frozenset = frozenset()):
        self.rng, self.blocks, self.caching, self.lacks = rng, blocks, caching, lacks
        self.double_free, self.scale, self.partial = double_free, scale, partial
        self.unpin = unpin  # whether finished requests' blocks may go back by `unpin_blocks`
        self.families = [[rng.randrange(1 << 30) for _ in range(rng.randint(2, 10) * scale)]
                         for _ in range(rng.randint(1, 3))]
        self.hash_ids: dict[tuple, int] = {}
        self.live: dict[int, tuple[list[int], int]] = {}  # rid -> (unit contents, group)
        self.shared: dict[int, int] = {}  # rid -> units its prompt shares with its family
        self.next_rid = 0
        self.ops: list = []

    def step(self) -> None:
        held, partial = len(self.live), self.partial and self.caching
        actions = [(self.admit, 3.0), (self.grow, 2.0 if held else 0),
                   (self.finish, 0.6 + 0.3 * held if held else 0), (self.edge_alloc, 0.4),
                   (self.evict, 0.3), (self.probe, 0.4 if self.caching else 0),
                   (self.reset, 0.15), (self.pin, 0.25 if held else 0),
                   (self.free_twice, 0.1 if held and self.double_free else 0),
                   (self.tail, 1.0 if held and partial else 0),
                   (self.copy, 0.3 if held and partial and NO_MOVE not in self.lacks else 0)]
        funcs, weights = zip(*actions)
        self.rng.choices(funcs, weights)[0]()

    def hashes(self, contents: list[int]) -> tuple[int, ...]:
        return tuple(self.hash_ids.setdefault(tuple(contents[:i + 1]), len(self.hash_ids) + 1)
                     for i in range(len(contents)))

    def prompt(self) -> list[int]:
        rng = self.rng
        base = rng.choice(self.families)
        self.parted = rng.randint(0, len(base))
        return base[:self.parted] + [rng.randrange(1 << 30)
                                     for _ in range(rng.randint(0, 4 * self.scale))]

    def _new_rid(self) -> int:
        self.next_rid += 1
        return self.next_rid

    def admit(self) -> None:
        rng = self.rng
        rid, contents = self._new_rid(), self.prompt()
        self.shared[rid] = self.parted
        group = 1 if rng.random() < 0.2 else 0
        hashes = self.hashes(contents)
        self.live[rid] = (contents, group)
        others = [r for r in self.live if r != rid]
        if others and rng.random() < 0.12:
            self.ops.append(Share(rid, rng.choice(others), rng.randint(1, 6)))
        elif self.caching and rng.random() < 0.75:
            self.ops.append(Lookup(rid, hashes, group))
        if rng.random() < 0.1:
            self.ops.append(Pad(rid, rng.randint(1, 3)))
        self.ops.append(Alloc(rid, rng.randint(0, len(contents) // self.scale + 1)))
        if self.caching and rng.random() < 0.85:
            self.ops.append(Cache(rid, hashes, group, self.mask()))
        if self.partial and self.caching and rng.random() < 0.6:
            self.tail(rid)

    def mask(self) -> tuple[int, ...]:
        """Mostly none; else, as a sparse retention group masks blocks no hit can use, a few
        positions of the blocks being cached."""
        rng = self.rng
        skip = () if rng.random() < 0.8 else tuple(sorted(rng.sample(range(6), rng.randint(1, 3))))
        return () if NO_MASK in self.lacks else skip  # drawn all the same: the stream goes on

    def grow(self) -> None:
        """A decode step: one more block, and the block before it now full and cached."""
        rng = self.rng
        rid = rng.choice(list(self.live))
        contents, group = self.live[rid]
        contents += [rng.randrange(1 << 30) for _ in range(rng.randint(1, self.scale))]
        self.ops.append(Alloc(rid, rng.choice((1, 1, 1, 2))))
        if self.caching and rng.random() < 0.8:
            self.ops.append(Cache(rid, self.hashes(contents), group))
        if self.partial and self.caching and rng.random() < 0.4:
            self.tail(rid, len(contents))  # the longer tail supersedes the shorter one

    def tail(self, rid: int | None = None, units: int | None = None) -> None:
        """A prompt tail inside a block registered as a partial entry: its end, or where it
        parts from its family (where a sibling's lookup stops), or anywhere before."""
        rng = self.rng
        rid = rid if rid is not None else rng.choice(list(self.live))
        contents, group = self.live[rid]
        if not contents:
            return
        units = units or rng.choice((len(contents), max(1, self.shared.get(rid, 0)),
                                     max(1, self.shared.get(rid, 0)),
                                     rng.randint(1, len(contents))))
        replace = rng.random() < 0.1 and NO_REPLACE not in self.lacks
        # An earlier release: a non-replacing entry strictly inside a block (before 0.32)
        if not replace and self.lacks & {NO_REPLACE, NO_BOUNDARY}:
            if self.scale == 1:  # a block of one unit has no inside
                return
            if units % self.scale == 0:
                units -= 1
            if units == 0:
                return
        self.ops.append(CachePartial(rid, units, self.hashes(contents), group, replace))

    def copy(self) -> None:
        """A request keeps writing into a cached block: the cache gets a private copy."""
        rng = self.rng
        rid = rng.choice(list(self.live))
        contents, group = self.live[rid]
        dst = self._new_rid()
        self.live[dst] = (list(contents), group)
        self.ops.append(Move(rid, rng.randint(0, max(0, len(contents) // self.scale)), dst))

    def finish(self) -> None:
        rng = self.rng
        rids = tuple(rng.sample(list(self.live), rng.randint(1, min(3, len(self.live)))))
        for rid in rids:
            del self.live[rid]
        if rng.random() < 0.12 and self.unpin:
            self.ops.append(Unpin(rids))
        else:
            self.ops.append(Free(rids, reverse=rng.random() < 0.85))

    def pin(self) -> None:
        """A connector pins a request's blocks: its free then names each of them twice."""
        self.ops.append(Pin(self.rng.choice(list(self.live))))

    def free_twice(self) -> None:
        """A double free: refused, so the request stays live (and is freed properly later)."""
        self.ops.append(DoubleFree(self.rng.choice(list(self.live))))

    def edge_alloc(self) -> None:
        """Exactly the free blocks, one fewer, or one more (refused: nothing may change)."""
        rid = self._new_rid()
        self.live[rid] = ([], 0)
        self.ops.append(Alloc(rid, self.rng.choice((-1, 0, 1)), relative=True))

    def evict(self) -> None:
        rng = self.rng
        self.ops.append(Evict(tuple(rng.randrange(self.blocks + 1)
                                    for _ in range(rng.randint(1, 3)))))

    def probe(self) -> None:
        rng = self.rng
        hashes = self.hashes(self.prompt())
        groups = rng.choice(((0,), (1,), (0, 1), (1, 0)))
        self.ops.append(Probe(hashes, groups))

    def reset(self) -> None:
        rng = self.rng
        if self.live and rng.random() < 0.6:  # mostly once everything is freed: it succeeds
            rids = tuple(self.live)
            self.live.clear()
            self.ops.append(Free(rids))
        self.ops.append(Reset())


NAME = "blockpool/4"
GENERATOR = TraceGenerator(NAME, build, num_ops=200, max_fuzz_ops=200)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes


@functools.cache
def generator_for(preconditions: frozenset) -> TraceGenerator:
    """The generator of an implementation that declares `preconditions` (`profile.py`): its own
    stream, e.g. "blockpool/4[no double free]" where its callers never double-free, so a
    (generator, seed, index) still names one trace forever."""
    double_free, unpin = double_frees_allowed(preconditions), unpins_allowed(preconditions)
    lacks = frozenset(text for text in LACKS if text in preconditions)
    if double_free and unpin and not lacks:
        return GENERATOR
    tags = ([] if double_free else ["no double free"]) + ([] if unpin else ["no-unpin"]) + \
        [tag for text, tag in LACKS.items() if text in lacks]
    return TraceGenerator(f"{NAME}[{', '.join(tags)}]",
                          functools.partial(build, double_free=double_free, unpin=unpin,
                                            lacks=lacks),
                          num_ops=200, max_fuzz_ops=200)
