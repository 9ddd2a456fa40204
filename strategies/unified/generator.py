"""Seeded unified traces (`unified/1`): the radix generator's stream (`strategies.radix.generator`:
prompt families over a small vocabulary, key lengths at page edges, small pools, chunked prefill,
decode across page edges, probes, load-back inserts, evictions, every eviction policy, events on
and off, resets) for a cache with full attention, and (`unified-swa/1`) the same stream for a
cache with the SWA component, with a window; (`unified-host/1`) tree ops for a cache with
HiCache's host tier; and (`unified-mamba/1`) tree ops alone (probes, inserts
that hand the tree a Mamba state, evictions, resets) for a cache with the Mamba component. Trace `index` of `seed` is the same forever; a
change to what this produces must bump the version."""

from __future__ import annotations

import random

from kvfuzz.strategies.radix import generator as radix
from kvfuzz.strategies.sources import TraceGenerator, misuse_stream
from kvfuzz.strategies.unified.trace import Trace, from_radix

ALL_MISUSE = radix.ALL_MISUSE


def build(rng: random.Random, num_ops: int, allowed: frozenset = ALL_MISUSE) -> Trace:
    return from_radix(radix.build(rng, num_ops, allowed))


NAME = "unified/1"
GENERATOR = TraceGenerator(NAME, build, num_ops=radix.GENERATOR.num_ops,
                           max_fuzz_ops=radix.GENERATOR.max_fuzz_ops)
generate, from_bytes = GENERATOR.generate, GENERATOR.from_bytes


def build_swa(rng: random.Random, num_ops: int, allowed: frozenset = ALL_MISUSE) -> Trace:
    """The same stream for a cache with the SWA component, and its window: under a page, a
    page, a few pages and one token more, so that windows end inside pages and at their
    edges, and chunked prefill leaves slots out of the window."""
    trace = radix.build(rng, num_ops, allowed)
    page = trace.page_size
    window = rng.choice((max(1, page // 2), page, 2 * page, 2 * page + 1, 4 * page))
    return from_radix(trace, "full+swa", window)


SWA = TraceGenerator("unified-swa/1", build_swa, num_ops=radix.GENERATOR.num_ops,
                     max_fuzz_ops=radix.GENERATOR.max_fuzz_ops)


def build_mamba(rng: random.Random, num_ops: int, allowed: frozenset = ALL_MISUSE) -> Trace:
    """Tree ops for a cache with the Mamba component: the radix stream's keys (prompt families,
    lengths at page edges, namespaces), mostly inserts, each handing the tree a Mamba state, and
    matches, over a pool of 2 to 8 states, small enough that an insert often evicts one
    (what `_alloc_mamba_slot` does when the pool is empty), and a full pool that evicts too.
    No request runs (`unified.trace.TREE_OPS`), so `allowed` changes nothing."""
    page = rng.choice((1, 1, 1, 2, 4, 8))
    pages = rng.choice((rng.randint(4, 10), rng.randint(10, 30)))
    gen = radix._Generator(rng, page, allowed)
    actions = ((gen.insert, 4.0), (gen.probe, 3.0), (gen.evict, 0.6), (gen.reset, 0.1))
    funcs, weights = zip(*actions)
    while len(gen.ops) < num_ops:
        rng.choices(funcs, weights)[0]()
    trace = radix.Trace(page, page * pages, rng.choice(radix.POLICIES), rng.random() < 0.5,
                        tuple(gen.ops[:num_ops]))
    return from_radix(trace, "full+mamba", mamba_slots=rng.randint(2, 8))


MAMBA = TraceGenerator("unified-mamba/1", build_mamba, num_ops=80,
                       max_fuzz_ops=radix.GENERATOR.max_fuzz_ops)


def build_host(rng: random.Random, num_ops: int, allowed: frozenset = ALL_MISUSE) -> Trace:
    """Tree ops for a cache with HiCache's host tier (write-back): the radix stream's keys and
    follow-up turns (an earlier key and more: chains long enough for the release's load-back
    threshold), inserts, matches (each loading its host hit back), repeats of earlier keys,
    storage prefetches (a touch), host locks under
    pressure (a pin), evictions (half of them of everything evictable: `relative`), over a device
    pool of 12 to 30 pages and a host pool of 2 to 12, small enough that a backup often finds the
    host full and reclaims or drops; a third of them write-through (a node backed up at its
    first insert). No request runs, so `allowed` changes nothing."""
    page = rng.choice((1, 1, 2, 4))
    gen = radix._Generator(rng, page, allowed)
    keys: list = []  # what was inserted: a follow-up turn extends one, a probe repeats one

    def insert() -> None:
        gen.insert()
        keys.append(gen.ops[-1].tokens)

    def follow_up() -> None:  # a conversation's next turn: long chains, long host hits
        if not keys:
            return insert()
        base = rng.choice(keys) + tuple(gen.sequence(rng.randint(1, 2 * page + 2)))
        keys.append(base)
        gen.ops.append(radix.Insert(base, 0))

    def repeat() -> None:  # a request for an earlier prompt (often a long one): its host
        if keys:           # part loads back once past the load-back threshold
            pool = sorted(keys, key=len)[-4:] if rng.random() < 0.6 else keys
            gen.ops.append(rng.choice((radix.Match, radix.Match, radix.Pin, radix.Touch))(
                rng.choice(pool), 0))

    actions = ((insert, 2.0), (follow_up, 2.5), (gen.probe, 1.5), (repeat, 2.0),
               (gen.evict, 1.5), (gen.reset, 0.05))
    funcs, weights = zip(*actions)
    while len(gen.ops) < num_ops:
        rng.choices(funcs, weights)[0]()
    trace = radix.Trace(page, page * rng.randint(12, 30), rng.choice(radix.POLICIES),
                        rng.random() < 0.5, tuple(gen.ops[:num_ops]))
    policy = rng.choice(("write_back", "write_back", "write_through"))
    return from_radix(trace, "full+host", host_size=page * rng.randint(2, 12),
                      host_policy=policy)


HOST = TraceGenerator("unified-host/1", build_host, num_ops=80,
                      max_fuzz_ops=radix.GENERATOR.max_fuzz_ops)


def generator_for(unsupported: frozenset, swa: bool = False,
                  mamba: bool = False, host: bool = False) -> TraceGenerator:
    """The generator for an implementation that does not support the misuse in `unsupported`,
    e.g. "unified/1[no reset with requests in flight]"; `swa`: for a cache built with the SWA
    component ("unified-swa/1"); `mamba`: with the Mamba component ("unified-mamba/1");
    `host`: with HiCache's host tier ("unified-host/1")."""
    if host:
        return HOST
    if mamba:
        return MAMBA
    return misuse_stream(SWA if swa else GENERATOR, ALL_MISUSE, unsupported)
