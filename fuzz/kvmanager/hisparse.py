"""The KV-cache-manager judge's reduced mode for vLLM's HiSparse groups (`Trace.hisparse`, the
"hisparse" profile): kvfuzz's oracle models one pool, and HiSparse's source group has a second
one on the host, publishes a page's hash only once its write-back is done and keeps hits the
device groups lost. Nothing here asks the oracle; what is compared holds whatever the manager
decides, from what its scheduler relies on (each property with a mutant it catches,
`tests/kvmanager/test_hisparse.py`):

- a hit: at most `num_tokens - 1` tokens, a multiple of the block; the indexer's blocks cover it
  exactly, the source group's at least (a host hit may run longer: `retains_longer_hit`), each
  cached under the request's hash of that block in its own pool; the resident and hot groups
  none;
- an admission with a hit of h tokens (no external tokens: HiSparse's connector reports none):
  the source table is the source group's first cdiv(h, b) hit blocks, then the new blocks
  `allocate_slots` returned, none of the retained hit past what the request adopts (vLLM's
  `allocate_slots` trims it; a cached block kept there would be written by the recompute);
- `allocate_slots`: None, or new blocks per group, the source's and indexer's distinct and not
  null; after a success the source, indexer and resident tables cdiv(slots, b) blocks each
  (slots: the computed tokens and speculative decoding's lookahead slots, `Trace.lookahead`,
  cut at the model's length; since 2026-12-08, `hisparse_checks.slots`), and after
  an admission with a hit the hot region (a new request resuming a host prefix reads
  host-backed history); an admission made exactly when the released counts say it fits
  (`admission_fits`: each group's new blocks and its adopted hit blocks that are free, the
  resident pages past the hit's host pages, the hot region, the watermark; the step's slots
  with its lookahead, the whole request first, without, where the scheduler asks it); a running
  request's step never None with room for the most a step can need (per device group a block
  a slot, the hot region; on the host a block a slot; lookahead slots included);
- with EAGLE's drop (`Trace.eagle`, the four groups alone), the hit's exact length from the
  pools' entries (`hisparse_cow.HostCopies.hit_length_problems`: the source group looked up a
  block past its cap on the host and dropping one, then the indexer so within it);
- after every op, the worker's report of the write-backs the connector planned
  (`update_spills`: one op later, or late, out of order and in parts with
  `Trace.hisparse_lag`, `hisparse_lag.py`), then: both pools' invariants
  (`state_violations`); the host pool conserved: a block's reference count is exactly the
  live source tables that hold it, plus the write-backs in flight to it (a write-back pins
  its host block until it completes), plus the finished requests whose pages wait for their
  write-backs; nothing published before it is durable: a host block with a hash had a
  write-back complete since it was last handed out; and once durable it is published: a
  running request's source blocks up to the first one not yet durable, within its computed
  tokens, are cached, and a finished request's held pages once its last write-back is done;
  the device pool exactly: a block's count is the live indexer and hot tables that hold it,
  plus the resident pages still pinned, plus the write-backs in flight pinning it
  (`hisparse_pins.py`: the coordinator unpins clean pages, which stay in the append-only tables);
  a host hit's pages resident at its first step exactly where a GPU copy of them was recorded
  and not yet reused (`hisparse_copies.py`);
- `reset_prefix_cache` that succeeds leaves nothing cached in either pool; `evict_blocks`
  leaves none of the device blocks it named cached.

Which blocks each allocation takes and where each op's frees go, on both pools:
`hisparse_queue.py` (since 2026-12-07; their order: `hisparse_order.py`); the device pool's
cache map after every op (beside a Mamba group since 2026-12-07, on every HiSparse profile
since later that day):
`hisparse_caching.py`; the host pool's, always: `hisparse_hostcache.py`. Not compared in this
mode: which blocks a hit picks, the hit's length against
the longest possible, a running request's refusals short of that room (its hot region and
resident pages follow the coordinator's residency, not modelled), residency updates, row
mirrors and host copies (the worker's views).
"""

from __future__ import annotations

import functools

from kvfuzz.fuzz.engine.lockstep import Call, crash_problems, handles, short
from kvfuzz.fuzz.kvmanager import (hisparse_admission, hisparse_cap, hisparse_caching,
                                   hisparse_cow, hisparse_hostcache, hisparse_import,
                                   hisparse_lag, hisparse_order, hisparse_pins, hisparse_queue)
from kvfuzz.fuzz.kvmanager.align import AlignLockstep, _Unmodelled
from kvfuzz.fuzz.kvmanager.connector import LOADING
from kvfuzz.fuzz.kvmanager.hisparse_checks import (HOT, HOT_BLOCKS, INDEXER, SOURCE,
                                                   allocation_problems, listed,
                                                   pool_problems, reset_evict_problems,
                                                   table_problems)
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING, WAITING, state_read
from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.oracle.kvmanager.model import NothingToAllocate
from kvfuzz.strategies.kvmanager.trace import Decode, Evict, Reset, Sample, Schedule

RETAINED = "host hit longer than the device groups' (retained)"
WRITTEN = "write-backs reported done"
PUBLISHED = "host pages published"
ROOMY_REFUSAL = hisparse_admission.ROOMY_REFUSAL
LOOKAHEAD_BLOCKS = hisparse_admission.LOOKAHEAD_BLOCKS


class HiSparseLockstep(hisparse_order.FreeOrder, hisparse_hostcache.HostCaching,
                       hisparse_queue.PoolQueues,
                       hisparse_caching.DeviceCaching,
                       hisparse_admission.Admissions,
                       hisparse_cow.HostCopies, hisparse_pins.ResidentPins,
                       hisparse_lag.LaggedReports, hisparse_cap.HiSparseCap,
                       hisparse_import.HiSparseImports, AlignLockstep):
    """`AlignLockstep` (and so `KVManagerLockstep`) for every trace but a HiSparse one, which
    the methods below judge in the reduced mode (each delegates otherwise); a second
    connector's imports into the host pool: `hisparse_import.py`; the worker's reports, late
    or not, and the holds of write-backs in flight: `hisparse_lag.py`; the device pool's pins:
    `hisparse_pins.py`; the host's copy-on-write and a Mamba "align" group beside the four
    (the "hisparse cow" profile): `hisparse_cow.py`."""

    EVENTS = AlignLockstep.EVENTS + (RETAINED, WRITTEN, PUBLISHED, ROOMY_REFUSAL) + \
        hisparse_admission.LOOKAHEAD_EVENTS + (hisparse_cow.EAGLE_DROP,) + \
        hisparse_import.EVENTS + hisparse_lag.EVENTS + hisparse_pins.PIN_EVENTS + \
        hisparse_cow.EVENTS + hisparse_queue.EVENTS + hisparse_caching.EVENTS + \
        hisparse_hostcache.EVENTS + hisparse_order.EVENTS + hisparse_cap.EVENTS

    def build_model(self, trace):
        self.hs = trace.hisparse > 0
        if not self.hs:
            return super().build_model(trace)
        self.align = False
        # a Mamba "align" group beside the four, hashed per fewer tokens than a block
        self.cow = trace.mamba_mode == "align"
        self.groups, self.unit = (5, trace.hash_size) if self.cow else (4, trace.block_size)
        self.requests = {}
        self.seen = set()
        self.planned: list[tuple[int, int]] = []  # write-backs planned by this op
        self.in_flight: list[tuple[int, int]] = []  # planned before it: done at its end
        self.durable: set[int] = set()  # host blocks written back since handed out
        self.unconfirmed: set[int] = set()  # a failed import's valid pages: may be published
        self.restores: set[int] = set()  # transfers restoring an import's page (host->device)
        self.unready: dict[int, int] = {}  # rid -> its first page of a failed import
        self.import_pages: dict[int, int] = {}  # rid -> the pages its import's tables hold
        # rid -> (page, block): a cached hit block it kept for the partial last page of an
        # import, ready for it only once it writes the page back itself
        self.rewrite: dict[int, tuple[int, int]] = {}
        self.owners: dict[int, int] = {}  # transfer id -> the request whose step planned it
        self.evicted: tuple[int, ...] = ()
        self.reset_done = False
        self.host_keys: list = [None] * trace.hisparse
        self.device_keys: list = [None] * trace.blocks
        self.published = 0  # host blocks with a hash at the last read
        self.host_free = self.device_free = 0  # the free counts at the last read
        self.host_ref: list[int] = []  # and the reference counts
        self.device_ref: list[int] = []
        self.start_reports()
        self.start_pins()
        self.start_cow()
        self.start_queues()  # the two pools' free queues (`hisparse_queue.py`)
        self.start_order()  # the order of an op's frees at their ends (`hisparse_order.py`)
        self.start_device_caching()  # the device pool's cache map (`hisparse_caching.py`)
        self.start_host_caching()  # the host pool's (`hisparse_hostcache.py`)
        self.start_worker()  # the worker's copies of the Mamba tables (`align_reads.py`)
        self.count_configs(trace)
        return _Unmodelled()

    def initial_problems(self):
        return self._pools() if self.hs else super().initial_problems()

    # -- ops ----------------------------------------------------------------------------------
    @handles(Schedule)
    def schedule(self, op: Schedule):
        if not self.hs:
            return (yield from super().schedule(op))
        request = self.requests.get(op.rid)
        if request is None or request.status == LOADING:  # it waits for its import
            return
        if request.status == WAITING and request.computed:  # its import reported: no lookup
            return (yield from self._resume(op.rid, request, op.chunk))
        if request.status == WAITING:
            got = yield self.capped_lookup(  # (the caller's cap: `hisparse_cap.py`)
                "get_computed_blocks", op.rid, request, op.max_hit, lambda e, r, actual, raised:
                self._hisparse_hit_problems(request, actual, raised))
            blocks, hit, _ = got.actual
            self.count("admission with a hit" if hit else "admission, no hit")
            if len(blocks[SOURCE]) > cdiv(hit, self.trace.block_size):
                self.count(RETAINED)
            new = min(op.chunk, len(request.tokens) - hit)
            if self.cow:  # (the Mamba group's hit, for the admission's count)
                self.mamba_hit = blocks[hisparse_cow.MAMBA]
            return (yield from self._step(op.rid, request, new, hit, blocks[SOURCE],
                                          blocks[INDEXER]))
        pending = len(request.tokens) - request.computed
        if pending > 0:
            self.count("prefill chunk")
            return (yield from self._step(op.rid, request, min(op.chunk, pending), None, None))

    @handles(Decode, Sample)
    def decode(self, op):
        if not self.hs:
            return (yield from super().decode(op))
        request = yield from self._sample(op)
        if request is not None:
            return (yield from self._step(op.rid, request, 1, None, None))

    @handles(Evict)
    def evict(self, op: Evict):
        if not self.hs:
            return (yield from super().evict(op))
        self.evicted = tuple(sorted({b for b in op.block_ids if 0 < b < self.trace.blocks}))
        self.count("evict")
        yield Call(f"evict_blocks({set(self.evicted) or '{}'})", "evict_blocks",
                   (list(self.evicted),), oracle=None)

    @handles(Reset)
    def reset(self, op: Reset):
        if not self.hs:
            return (yield from super().reset(op))
        got = yield Call("reset_prefix_cache()", "reset_prefix_cache", (), oracle=None,
                         compare=lambda e, r, actual, raised: crash_problems(raised)
                         if raised is not None else [])
        self.reset_done = got.actual is True
        self.count("reset" if self.reset_done else "reset refused")

    # -- admission and allocation -------------------------------------------------------------
    def _step(self, rid, request, new, hit, hit_source, indexer_hit=()):
        """allocate_slots of `new` tokens (an admission: after a hit of `hit` tokens, the
        source group's hit blocks `hit_source`, the indexer's `indexer_hit`), then the
        connector's residency work."""
        admission, size = hit is not None, self.trace.block_size
        args = (rid, new, hit or 0, admission, admission and self.trace.full_sequence_must_fit,
                any(r.status == RUNNING for other, r in self.requests.items() if other != rid),
                0)
        if new == 0 and not hit:
            self.count("allocate_slots of nothing refused")

            def refuse():
                raise NothingToAllocate(f"r{rid}: no new tokens and no hit to adopt")
            yield Call(f"allocate_slots(r{rid}, 0)", "allocate_slots", args, oracle=refuse)
            return []
        got = yield Call(f"allocate_slots(r{rid}, {new}{f', hit {hit}' if admission else ''})",
                         "allocate_slots", args, oracle=None,
                         compare=functools.partial(allocation_problems, groups=self.groups))
        if admission:
            wrong = self._admission_problems(rid, request, new, hit, hit_source, indexer_hit,
                                             args[5], got.actual is not None)
            if wrong:
                return wrong
        if got.actual is None:
            self.count("allocate_slots refused")
            return self._refusal_problems(rid, request, new, hit, args[5])
        return (yield from self._stepped(rid, request, new, got.actual, hit, hit_source))

    def _stepped(self, rid, request, new, actual, hit=None, hit_source=None):
        """After `allocate_slots` gave `actual`: the tables, then the connector's residency
        work (`hisparse_step`)."""
        admission, size = hit is not None, self.trace.block_size
        self.count("allocate_slots ok")
        if admission:  # admitted afresh: the coordinator's state of it starts over
            self.admitted(rid, hit)
            self.unready.pop(rid, None)
            self.rewrite.pop(rid, None)
            self.import_pages.pop(rid, None)
        self.durable -= set(actual[SOURCE])  # handed out afresh: not written back yet
        self.unconfirmed -= set(actual[SOURCE])
        if self.cow:
            self.mamba_stepped(rid, request.computed + (hit or 0))
        request.computed += (hit or 0) + new
        request.status = RUNNING
        tables = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        covered = self.slots(request.computed)  # (with its lookahead slots)
        if cdiv(covered, size) > cdiv(request.computed, size):
            self.count(LOOKAHEAD_BLOCKS)
        problems = table_problems(rid, tables, request.computed, size,
                                  0 if admission else self.import_pages.get(rid, 0),
                                  self.groups, covered)
        if self.cow and not problems:
            problems += self.mamba_step_problems(rid, request, tables)
        if admission and hit and not problems and len(tables[HOT]) != HOT_BLOCKS:
            # a new request resuming a host prefix reads host-backed history: its hot region
            # comes with the admission (`HiSparseHotManager.add_local_computed_blocks`)
            problems.append(("hot region", f"r{rid}: an admission with a hit of {hit} tokens "
                                           f"holds {short(tables[HOT])}: expected a hot region "
                                           f"of {HOT_BLOCKS} blocks"))
        if admission and not problems:
            # the hit's blocks it adopts, then the blocks it writes: none of those retained
            # past the hit (cached pages another request may share)
            kept = hit // size  # (a hit inside a block: its copy-on-write block is new)
            expected = list(hit_source[:kept]) + list(actual[SOURCE])
            if tables[SOURCE] != expected:
                problems.append(("retained hit", (
                    f"r{rid}: a hit of {hit} tokens in blocks of {size}: expected the source "
                    f"group's first {kept} hit blocks (of {short(hit_source)}) then its new "
                    f"blocks, {short(expected)}, actual table {short(tables[SOURCE])}")))
        yield Call("", "set_computed", (rid, request.computed, RUNNING), oracle=None)
        # the pages this allocation's cache_blocks publishes once durable (a finish's hold)
        self.cache_pages[rid] = min(request.computed, len(request.tokens)) // size
        planned = yield Call("", "hisparse_step", (rid, min(request.computed,
                                                            len(request.tokens))),
                             oracle=None, compare=state_read)
        problems += yield from self.take_host_copies(rid, hit, hit_source, tables, actual)
        pairs = self.received(rid, planned.actual)
        self.planned += pairs
        self.owners.update((tid, rid) for tid, _ in pairs)
        return problems + self.stepped(rid, tables, actual, self.cache_pages[rid])

    def _hisparse_hit_problems(self, request, actual, raised) -> list[tuple[str, str]]:
        if raised is not None:
            return crash_problems(raised)
        try:
            blocks, hit, _ = actual
            source, indexer, resident, hot = blocks[:4]
            if len(blocks) != self.groups:
                raise ValueError(len(blocks))
        except (TypeError, ValueError):
            return [("prefix hit", f"expected (four groups' blocks, hit tokens, boundary), "
                                   f"actual {short(actual)}")]
        tokens, size = len(request.tokens), self.trace.block_size
        if request.skip and hit:
            return [("prefix hit", f"a request that skips the cache hit {hit} tokens")]
        if not 0 <= hit <= tokens - 1 or hit % self.unit:
            return [("prefix hit", f"{hit} tokens of a {tokens}-token prompt: expected a "
                                   f"multiple of {self.unit} below {tokens}")]
        count = cdiv(hit, size)
        if len(indexer) != count or len(source) < count or resident or hot:
            return [("prefix hit", f"{hit} tokens in blocks of {size}: expected {count} indexer "
                                   f"blocks, {count} or more source blocks, no resident or hot "
                                   f"ones, actual {short(blocks)}")]
        mamba = self.mamba_hit_problems(hit, blocks, request) if self.cow else []
        if mamba:
            return mamba
        units, per = request.hashes(self.unit), size // self.unit  # (a block's key: its last's)
        for group, table, keys in ((SOURCE, source, self.host_keys),
                                   (INDEXER, indexer, self.device_keys)):
            # (a block the hit ends inside is cached under a partial entry: not compared)
            for index, block in enumerate(table[:hit // size] if self.cow else table):
                entries = keys[block] if 0 < block < len(keys) else None
                if (index + 1) * per > len(units) or \
                        (units[(index + 1) * per - 1], group) not in listed(entries):
                    return [("prefix hit", f"group {group}'s hit block {index}, block {block}, "
                                           f"is not cached under the request's hash of it")]
        return self.cap_problems(request, hit, source) or \
            (self.hit_length_problems(request, hit) if self.cow or self.trace.eagle else [])

    # -- after the op -------------------------------------------------------------------------
    def state(self, op) -> list[tuple[str, str]]:
        if not self.hs:
            return super().state(op)
        if self.cow:
            self.mamba_step()
        written = self._reports()  # the worker's report: write-backs completed (hisparse_lag)
        if written:
            self.durable |= {block for _, block in written}
            self.rewrite = {rid: kept for rid, kept in self.rewrite.items()
                            if (rid, kept[1]) not in written}
        return self._pools()

    def _pools(self) -> list[tuple[str, str]]:
        host, size = self.read("host_pool"), self.trace.block_size
        device = {"num_free": self.read("num_free"), "ref": self.read("ref_counts"),
                  "keys": self.read("keys"), "cache": self.read("cache_map")}
        device["queue"], device["links"] = self.read("free_queue")
        problems = pool_problems("host pool", host, self.trace.hisparse) + \
            pool_problems("device pool", device, self.trace.blocks)
        held, live = [0] * self.trace.hisparse, {}
        for rid, request in self.requests.items():
            tables = self.read("block_ids", rid)
            live[rid] = tables if tables else [[]] * self.groups
            source = tables[SOURCE] if tables else []
            self.last_source[rid] = list(source)
            for block in source:
                if 0 < block < len(held):
                    held[block] += 1
            if request.status == WAITING and not request.computed and any(tables):
                problems.append(("block table", f"r{rid} waits and holds {short(tables)}"))
            if request.status == LOADING:  # its device blocks past the hit: not cached yet
                own = tables[INDEXER][cdiv(request.hit, size):] if tables else []
                cached = [b for b in own if 0 < b < len(device["keys"]) and
                          device["keys"][b] is not None]
                if cached:
                    problems.append(("cached before the load", f"r{rid}'s import is in "
                                     f"flight; indexer blocks {short(cached)} already cached"))
            problems += self._publication_problems(rid, request, source, host["keys"], size)
        problems += self.host_count_problems(held, host["ref"])
        problems += self.device_count_problems(live, device["ref"], host["keys"])
        problems += self.detached_problems(host["keys"], self.durable)
        early = [b for b, key in enumerate(host["keys"]) if key is not None and
                 b not in self.durable and b not in self.unconfirmed]
        if early:
            problems.append(("published early", f"host blocks {early[:6]} are cached with no "
                                                f"write-back done since they were handed out"))
        problems += reset_evict_problems(host, device, self.reset_done, self.evicted)
        problems += self.queue_pool_problems(host, device, live)
        published = sum(key is not None for key in host["keys"])
        if published > self.published:
            self.count(PUBLISHED)
        self.published = published
        self.host_keys, self.device_keys = list(host["keys"]), list(device["keys"])
        self.host_free, self.device_free = host["num_free"], device["num_free"]
        self.host_ref, self.device_ref = list(host["ref"]), list(device["ref"])
        self.evicted, self.reset_done = (), False
        return problems

    def _publication_problems(self, rid, request, source, keys, size) -> list[tuple[str, str]]:
        """Once durable, published: a running request's source blocks up to its first one with
        no write-back done (a hit's are done), within its computed tokens, are cached."""
        if request.status != RUNNING and not (request.status == WAITING and request.computed):
            return []
        lead = next((i for i, b in enumerate(source) if b not in self.durable), len(source))
        # (a failed import: the coordinator never learns which of its pages arrived, and
        # publishes none of the request's from there on; allowed, never required)
        lead = min(lead, self.unready.get(rid, lead), self.rewrite.get(rid, (lead,))[0])
        unpublished = [i for i in range(min(lead, request.computed // size))
                       if not 0 < source[i] < len(keys) or keys[source[i]] is None]
        return [("published late", f"r{rid}: source blocks {short(source[:lead])} are written "
                                   f"back and its first {request.computed} tokens computed, "
                                   f"but pages {unpublished[:6]} are not cached")] \
            if unpublished else []
