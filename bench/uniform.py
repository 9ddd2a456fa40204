"""The detection benchmark's baseline: plain uniform-random inputs of the same sizes as the seeded
generators', with none of their aim (no edge classes, no pool filled to the brim, no "one page
short"): what the edge classes and the trace generators' steering are measured against.
Valid by construction, so that every input is compared."""

from __future__ import annotations

import random

from kvfuzz.strategies.allocator.trace import (FREE_HOWS, MISUSES, Admit, AllocPages, Clear,
                                               Decode, Extend, Finish, GroupBegin, GroupEnd,
                                               Misuse, Trace, Truncate)
from kvfuzz.strategies.blockpool import trace as blockpool
from kvfuzz.strategies.kvmanager import trace as kvmanager
from kvfuzz.strategies.compaction import generator as compaction_generator
from kvfuzz.strategies.compaction.trace import (WHERE, WHICH, Alloc, Drain, Fire, Flush, Forward,
                                                Free, Pick)
from kvfuzz.strategies.compaction.trace import Trace as CompactionTrace
from kvfuzz.strategies.inputs import ceil_pages
from kvfuzz.strategies.mamba import trace as mamba
from kvfuzz.strategies.swa import trace as swa
from kvfuzz.strategies.paged.case import Case

TOKEN_BUDGET = 6144  # as the seeded builders


def uniform_input(target: str, rng: random.Random):
    return {"extend": _paged, "decode": _paged, "allocator": _allocator,
            "compaction": _compaction, "mamba": _mamba, "swa": _swa,
            "blockpool": _blockpool, "kvmanager": _kvmanager}[target](target, rng)


def _paged(target: str, rng: random.Random) -> Case:
    page_size, batch = rng.randint(1, 1024), rng.randint(1, 128)
    prefixes, seqs, budget = [], [], TOKEN_BUDGET
    for _ in range(batch):
        if target == "extend":
            prefix = rng.randint(0, 4 * page_size)
            seq = prefix + min(budget, rng.randint(0, 24 * page_size))
            budget -= seq - prefix
        else:
            seq = rng.randint(1, 7 * page_size)
            prefix = seq - 1
        prefixes.append(prefix)
        seqs.append(seq)
    demand = sum(ceil_pages(s, page_size) - ceil_pages(q, page_size) for q, s in zip(prefixes, seqs))
    ids = rng.sample(range(1, 2**20), batch + demand + rng.randint(0, 8))
    last_loc = tuple(ids[i] * page_size + (q - 1) % page_size if q else -1
                     for i, q in enumerate(prefixes))
    return Case(target, page_size, tuple(seqs), last_loc, tuple(ids[batch:]),
                prefix_lens=tuple(prefixes) if target == "extend" else ())


def _allocator(target: str, rng: random.Random, num_ops: int = 200) -> Trace:
    page_size = rng.randint(1, 16)
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(ALLOCATOR_OPS)
        rid += kind in ("admit", "alloc")
        ops.append(_allocator_op(kind, rng, rid, page_size))
    return Trace(page_size, page_size * rng.randint(2, 64), rng.random() < 0.5, tuple(ops),
                 rng.random() < 0.5)


ALLOCATOR_OPS = ("admit", "extend", "decode", "finish", "truncate", "alloc", "group", "clear",
                 "misuse")


def _allocator_op(kind: str, rng: random.Random, rid: int, page_size: int):
    live = rng.randint(1, max(1, rid))  # any request so far, finished or not
    if kind == "admit":
        return Admit(rid)
    if kind in ("extend", "decode"):
        rids = tuple({rng.randint(1, max(1, rid)) for _ in range(rng.randint(1, 4))})
        return Extend(rids, tuple(rng.randint(0, 2 * page_size) for _ in rids)) \
            if kind == "extend" else Decode(rids)
    if kind == "finish":
        return Finish(live, rng.choice(FREE_HOWS))
    if kind == "truncate":
        return Truncate(live, rng.randint(0, 4 * page_size), rng.choice(FREE_HOWS))
    if kind == "alloc":
        return AllocPages(rid, rng.randint(0, 4))
    if kind == "group":
        return rng.choice((GroupBegin(), GroupEnd()))
    if kind == "clear":
        return Clear()
    return Misuse(rng.choice(MISUSES), rng.randint(0, 99))


def _compaction(target: str, rng: random.Random, num_ops: int = 300) -> CompactionTrace:
    params = compaction_generator._params(rng)  # the same geometry as the seeded traces

    def pick() -> Pick:
        return Pick(rng.choice(WHERE), rng.randint(1, 4), rng.randrange(1000))
    ops = []
    for _ in range(num_ops):
        pool = rng.choice(params.pools())
        kind = rng.choice((Alloc, Free, Flush, Drain, Forward, Fire))
        ops.append(Alloc(pool, rng.randint(1, 6)) if kind is Alloc else
                   Free(pool, pick()) if kind is Free else
                   kind(pool, rng.random() < 0.5) if kind in (Flush, Drain) else
                   Forward(pick(), pick() if params.two_ended else None) if kind is Forward else
                   Fire(rng.choice(WHICH)))
    return CompactionTrace(params, tuple(ops))


def _mamba(target: str, rng: random.Random, num_ops: int = 200) -> mamba.Trace:
    """Any op, any request so far, any count: no batches aimed at the pool's size."""
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(("admit", "alloc", "finish", "group_begin", "group_end", "clear"))
        rid += kind in ("admit", "alloc")
        if kind == "admit":
            ops.append(mamba.Admit(rid))
        elif kind == "alloc":
            ops.append(mamba.AllocMany(rid, rng.randint(0, 8)))
        elif kind == "finish":
            ops.append(mamba.Finish(tuple({rng.randint(1, max(1, rid)) for _ in range(3)})))
        elif kind == "group_begin":
            ops.append(mamba.GroupBegin(rng.randint(0, 8)))
        else:
            ops.append(mamba.GroupEnd() if kind == "group_end" else mamba.Clear())
    return mamba.Trace(rng.randint(2, 128), tuple(ops))


def _swa(target: str, rng: random.Random, num_ops: int = 200) -> swa.Trace:
    """Any op, any request so far, any length: no windows or chunks aimed at the pages."""
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(tuple(swa.KINDS))
        rid += kind == "admit"
        some = rng.randint(1, max(1, rid))
        ops.append(swa.Admit(rid) if kind == "admit" else
                   swa.Extend((some,), (rng.randint(1, 32),)) if kind == "extend" else
                   swa.ExtendTail(some, rng.randint(1, 32), rng.randint(0, 32))
                   if kind == "extend_tail" else
                   swa.Decode((), rng.random() < 0.5) if kind == "decode" else
                   swa.Evict(some, rng.randint(0, 16), rng.choice(swa.HOWS)) if kind == "evict"
                   else swa.Finish(some, rng.choice(swa.HOWS)) if kind == "finish" else
                   swa.KINDS[kind]())
    page_size = rng.randint(1, 8)
    return swa.Trace(page_size, rng.randint(1, 64) * page_size, rng.randint(1, 64) * page_size,
                     rng.random() < 0.5, tuple(ops))


def _blockpool(target: str, rng: random.Random, num_ops: int = 200) -> blockpool.Trace:
    """Any op, any request so far, any count, hashes from a small range: no prompt families,
    no pool filled to the brim."""
    blocks, ops, rid = rng.randint(2, 64), [], 0

    def hashes() -> tuple[int, ...]:
        return tuple(rng.randint(1, 32) for _ in range(rng.randint(0, 8)))

    def rids() -> tuple[int, ...]:
        return tuple({rng.randint(1, max(1, rid)) for _ in range(rng.randint(1, 3))})

    for _ in range(num_ops):
        kind = rng.choice(("alloc", "lookup", "share", "pad", "cache", "free", "unpin", "evict",
                           "probe", "reset"))
        rid += kind in ("alloc", "lookup", "share", "pad")
        if kind == "alloc":
            ops.append(blockpool.Alloc(rid, rng.randint(0, 8)))
        elif kind == "lookup":
            ops.append(blockpool.Lookup(rid, hashes(), rng.randint(0, 1)))
        elif kind == "share":
            ops.append(blockpool.Share(rid, rng.randint(1, rid), rng.randint(1, 8)))
        elif kind == "pad":
            ops.append(blockpool.Pad(rid, rng.randint(1, 3)))
        elif kind == "cache":
            ops.append(blockpool.Cache(rng.randint(1, max(1, rid)), hashes(), rng.randint(0, 1)))
        elif kind in ("free", "unpin"):
            ops.append(blockpool.Free(rids(), rng.random() < 0.5) if kind == "free"
                       else blockpool.Unpin(rids()))
        elif kind == "evict":
            ops.append(blockpool.Evict(tuple(rng.randint(0, blocks) for _ in range(3))))
        elif kind == "probe":
            ops.append(blockpool.Probe(hashes(), (rng.randint(0, 1),)))
        else:
            ops.append(blockpool.Reset())
    return blockpool.Trace(blocks, rng.random() < 0.5, tuple(ops))


def _kvmanager(target: str, rng: random.Random, num_ops: int = 200) -> kvmanager.Trace:
    """Any op on any request so far, prompts of random tokens from a wide vocabulary (so
    prefixes are rarely shared), any chunk: no prompt families, no boundary-aimed cuts. The
    engine settings are drawn uniformly from what the format allows (they are configuration,
    not edge classes)."""
    block_size = rng.randint(1, 8)
    window = rng.choice((0, rng.randint(2, 32)))
    ops, rid = [], 0
    for _ in range(num_ops):
        kind = rng.choice(("arrive", "schedule", "decode", "preempt", "finish", "evict", "reset"))
        someone = rng.randint(1, max(1, rid))
        if kind == "arrive":
            rid += 1
            ops.append(kvmanager.Arrive(rid, tuple(rng.randint(0, 1000)
                                                   for _ in range(rng.randint(1, 32)))))
        elif kind == "schedule":
            ops.append(kvmanager.Schedule(someone, rng.randint(1, 64)))
        elif kind == "decode":
            ops.append(kvmanager.Decode(someone, rng.randint(0, 1000)))
        elif kind == "preempt":
            ops.append(kvmanager.Preempt(someone))
        elif kind == "finish":
            ops.append(kvmanager.Finish(someone))
        elif kind == "evict":
            ops.append(kvmanager.Evict(tuple(rng.randint(0, 64) for _ in range(3))))
        else:
            ops.append(kvmanager.Reset())
    retention = rng.choice((None, 0) + ((rng.randint(1, 8) * block_size,) if window else ()))
    return kvmanager.Trace(rng.randint(2, 64), block_size, window, rng.choice((1024, 64)),
                           tuple(ops), retention, rng.random() < 0.5,
                           rng.choice((None, rng.randint(1, 64))))
