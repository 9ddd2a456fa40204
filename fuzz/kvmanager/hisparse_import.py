"""The HiSparse reduced mode's handlers of the KV-connector ops (`connect`, `loaded`): a second
connector's tokens imported into HiSparse's host pool (the "hisparse import" profile), mixed
into `HiSparseLockstep`. From vLLM 0.33.0's source: the scheduler admits the request with
`num_external_computed_tokens` and an asynchronous load (`allocate_slots(...,
delay_cache_blocks=True)`); the source group allocates host blocks for the external pages and
tells the coordinator the prefix the load fills (`HiSparseSourceManager.
allocate_external_computed_blocks` -> `record_pending_host_import(local + external)`); the
resident group reserves the last imported page only (`HiSparseResidentManager.
allocate_external_computed_blocks`), the hot region comes with it; the load's report reaches
the coordinator through HiSparse's connector (`finish_host_import(failed=...)`: done, the
first floor((local + external) / b) pages are valid and ready, and the last one is restored
to its resident page), then the scheduler caches the request's computed tokens
(`_update_waiting_for_remote_kv`), which publishes the ready pages. Checked here, besides the
reduced mode's checks after every op:

- the source table covers hit + external: cdiv(h + e, b) blocks, the retained hit's first ones
  as far as they reach (line 497 of `kv_cache_manager.py` keeps cdiv(h + e, b) of them), then
  blocks of its own (not null, not the hit's, no other live request's); the indexer's
  cdiv(h + e, b) blocks; the resident pages: only the last imported page resident; the hot
  region;
- the import admitted exactly when the released counts say it fits (`import_counts`: the
  indexer's new and free hit blocks, the resident group's last imported page and its pages past
  the import, the hot region; on the host the source group's blocks past its retained hit, and
  those of it that are free; for the whole request first where the scheduler asks it, then the
  step's against the free blocks less those reserved; the watermark while others run);
- nothing of an import published (host) or cached (device) before its load is reported;
  once reported done, its full pages published; a failed import's pages never required
  (the coordinator is told the load failed, not which pages arrived), and never published
  past the valid prefix the scheduler keeps.

Not driven: synchronous loads (a `connect` without `load` is a plain admission here: no released
connector makes one under HiSparse, and vLLM 0.33.0 hands an import's pages to the coordinator only
through `finished_recving`, which a synchronous load does not report), imports of a one-token prompt
(the scheduler's rewind of its last token leaves it nothing computed, and it would be looked up
again holding its blocks), a request finished while its import is in flight (freed at once here, as
the full judge frees it; the scheduler holds its blocks until the load reports), and a resumed
request's refusal short of the room it can need (judged only with room for the most, as the
"hisparse" profile's running steps)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles, short
from kvfuzz.fuzz.kvmanager.connector import LOADING, state_read
from kvfuzz.fuzz.kvmanager.hisparse_checks import (HOT, HOT_BLOCKS, INDEXER, RESIDENT, SOURCE,
                                                   allocation_problems, import_counts)
from kvfuzz.fuzz.kvmanager.lockstep import RUNNING, WAITING
from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.oracle.kvmanager.model import NothingToAllocate
from kvfuzz.strategies.kvmanager.connector_ops import Connect, Loaded

IMPORT = "host import admitted"
IMPORT_RETAINED = "host import beside a retained host hit"
IMPORT_SHORT = "host import short of the retained hit"
IMPORT_DONE = "host import done"
IMPORT_FAILED = "host import failed, a prefix valid"
IMPORT_FREED = "host import failed, nothing valid (freed)"
RESUMED = "resumed after its host import"
IMPORT_REFUSED = "host import refused"
EVENTS = (IMPORT, IMPORT_RETAINED, IMPORT_SHORT, IMPORT_DONE, IMPORT_FAILED, IMPORT_FREED,
          RESUMED, IMPORT_REFUSED)


class HiSparseImports:
    """Mixed into `HiSparseLockstep` (its requests, `_step`, `_pools`); every handler delegates
    to the full judge's for a trace that is not HiSparse's."""

    @handles(Connect)
    def connect(self, op: Connect):
        if not self.hs:
            return (yield from super().connect(op))
        request = self.requests.get(op.rid)
        if request is None or request.status != WAITING or request.computed:
            return
        rid, size = op.rid, self.trace.block_size
        self.unready.pop(rid, None)
        self.rewrite.pop(rid, None)
        got = yield self.capped_lookup(  # (the caller's cap: `hisparse_cap.py`)
            "connector_lookup", rid, request, op.max_hit, lambda e, r, actual, raised:
            self._hisparse_hit_problems(request, _head(actual), raised))
        cap = request.cap
        blocks, hit = got.actual[0], got.actual[1]
        external = 0 if request.skip else max(0, min(op.external, len(request.tokens) - hit))
        if op.load:  # an asynchronous load without the tokens the cap drops is none
            external = self.capped_external(cap, hit, external, size)
        if not (op.load and external) or len(request.tokens) == 1:
            # no import: a plain admission (see the docstring)
            self.count("admission with a hit" if hit else "admission, no hit")
            new = min(op.chunk, len(request.tokens) - hit)
            return (yield from self._step(rid, request, new, hit, blocks[SOURCE],
                                          blocks[INDEXER]))
        others = any(r.status == RUNNING for o, r in self.requests.items() if o != rid)
        whole = self.trace.full_sequence_must_fit
        args = (rid, 0, hit, external, True, op.reserve, whole, others)
        made = yield Call(f"allocate_slots(r{rid}, 0, hit {hit}, external {external}, "
                          f"delayed caching{f', {op.reserve} reserved' if op.reserve else ''})",
                          "connect", args, oracle=None, compare=allocation_problems)
        fits = self._import_fits(request, hit, external, blocks, others, op.reserve)
        if fits != (made.actual is not None):
            return [("None vs success", f"r{rid}: an import of {external} tokens after a hit of "
                                        f"{hit}: expected {'blocks' if fits else 'None'} with "
                                        f"{self.device_free} device and {self.host_free} host "
                                        f"blocks free"
                                        f"{f', {op.reserve} reserved' if op.reserve else ''}"
                                        f", actual {short(made.actual)}")]
        if made.actual is None:
            self.count("allocate_slots refused")
            self.count(IMPORT_REFUSED)
            return []
        self.count(IMPORT)
        self.admitted(rid, hit)
        end = hit + external
        if len(blocks[SOURCE]) > cdiv(hit, size):
            self.count(IMPORT_RETAINED)
            if len(blocks[SOURCE]) > cdiv(end, size):
                self.count(IMPORT_SHORT)
        tables = (yield Call("", "block_ids", (rid,), oracle=None, compare=state_read)).actual
        problems = self._import_table_problems(rid, tables, hit, end, blocks[SOURCE])
        # the device blocks handed out: all it holds but its indexer hit (the external pages'
        # come from `allocate_external_computed_blocks`, which `allocate_slots` does not return)
        hit_blocks = set(blocks[INDEXER])
        self.handed_out([[], [b for group in tables[INDEXER:] for b in group
                              if b not in hit_blocks]])
        kept = min(len(blocks[SOURCE]), cdiv(end, size))
        own = list(tables[SOURCE][kept:]) if not problems else []
        if not problems:  # (the free queues' pops: `hisparse_queue.py`)
            self.import_allocated(rid, list(blocks[SOURCE][:kept]), own, list(blocks[INDEXER]),
                                  [tables[INDEXER][len(blocks[INDEXER]):],
                                   [tables[RESIDENT][-1]], list(tables[HOT])])
        self.durable -= set(own)  # handed out afresh: nothing written there yet
        request.computed, request.status, request.in_flight = end, LOADING, 0
        request.hit, request.held = hit, [kept]
        self.import_pages[rid] = cdiv(end, size)
        yield Call("", "set_computed", (rid, end, LOADING), oracle=None)
        return problems

    def import_allocated(self, rid, host_hit, host_new, device_hit, device_new) -> None:
        """An import's admission took these blocks (`allocate_new_computed_blocks`: each
        group's hit touched, then the external pages' new blocks, the groups in order; then
        `allocate_new_blocks`' hot region): `host_hit`, `device_hit` touched, `host_new` the
        source group's, `device_new` the indexer's, the resident group's last page, the hot
        region's. For the pools' queues (`hisparse_queue.py`)."""

    def import_freeing(self, rid) -> None:
        """A failed import with nothing valid is about to be freed (`free`): for the order
        of its frees (`hisparse_order.py`)."""

    def _import_table_problems(self, rid, tables, hit, end, hit_source) -> list:
        """The tables an import's admission leaves (see the module's docstring)."""
        size = self.trace.block_size
        pages, kept = cdiv(end, size), min(len(hit_source), cdiv(end, size))
        if len(tables) != 4:
            return [("import table", f"r{rid}: expected four groups' tables, actual "
                                     f"{short(tables)}")]
        source, others = tables[SOURCE], {b for o in self.requests if o != rid
                                          for b in (self.read("block_ids", o) or [[]])[SOURCE]}
        own = source[kept:]
        if len(source) != pages or source[:kept] != list(hit_source[:kept]) or \
                any(not b or b in hit_source or b in others for b in own):
            return [("import table", f"r{rid}: a hit of {hit} tokens and {end - hit} external "
                                     f"in blocks of {size}: expected the source group's first "
                                     f"{kept} hit blocks (of {short(hit_source)}) then "
                                     f"{pages - kept} of its own, actual {short(source)}")]
        resident = tables[RESIDENT]
        if len(tables[INDEXER]) != pages or len(resident) != pages or \
                any(resident[:-1]) or not resident[-1] or len(tables[HOT]) != HOT_BLOCKS:
            return [("import table", f"r{rid}: {end} tokens imported in blocks of {size}: "
                                     f"expected {pages} indexer blocks, {pages} resident pages "
                                     f"of which the last alone resident, a hot region of "
                                     f"{HOT_BLOCKS}, actual {short(tables)}")]
        return []

    def _import_fits(self, request, hit, external, blocks, others, reserve) -> bool:
        """Whether the released counts admit the import (`import_counts`): for the whole
        request first where the scheduler asks it (against every free block), then for the
        step's slots (against the free blocks less those reserved), the watermark while others
        run."""
        trace = self.trace
        end = min(hit + external, trace.max_model_len)
        watermark = int(trace.watermark * trace.blocks) if others else 0

        def fits(tokens, reserved) -> bool:
            device, host = import_counts(tokens, end, trace.block_size, list(blocks[SOURCE]),
                                         list(blocks[INDEXER]), self.host_ref, self.device_ref)
            return host <= self.host_free and device + watermark <= self.device_free - reserved
        whole = min(len(request.tokens), trace.max_model_len)
        return fits(end, reserve) and (not trace.full_sequence_must_fit or fits(whole, 0))

    def _resume_refusal(self, rid, request, slots, others) -> list:
        """The resumption of a request after its import refused with room for the most it can
        need: per device group a block a slot, the hot region, the watermark; on the host a
        block a slot (the whole request's where the scheduler checks it). (The import's own
        admission is judged exactly: `_import_fits`.)"""
        trace = self.trace
        if trace.full_sequence_must_fit:
            slots = max(slots, len(request.tokens))
        pages = cdiv(min(slots, trace.max_model_len), trace.block_size)
        device = 2 * pages + HOT_BLOCKS + (int(trace.watermark * trace.blocks) if others else 0)
        if self.device_free < device or self.host_free < pages:
            return []
        return [("refusal", f"r{rid}: resumed after its import, {slots} tokens refused with "
                            f"{self.device_free} device blocks free (it needs at most {device}) "
                            f"and {self.host_free} host blocks free (at most {pages})")]

    @handles(Loaded)
    def loaded(self, op: Loaded):
        if not self.hs:
            return (yield from super().loaded(op))
        request = self.requests.get(op.rid)
        if request is None or request.status != LOADING:
            return
        rid, size, end = op.rid, self.trace.block_size, request.computed
        failed = op.valid >= 0
        # a failed load's valid tokens: to the first failed block's start, at or past the
        # local hit (the scheduler's `_update_requests_with_invalid_blocks`)
        valid = end if not failed else 0 if op.valid == 0 else \
            max(request.hit // size * size, min(op.valid, end) // size * size)
        yield Call(f"finish_host_import(r{rid}, failed={failed})", "hisparse_import_done",
                   (rid, failed), oracle=None)
        if not failed:
            self.import_done(rid, end)
        source = self.read("block_ids", rid)[SOURCE]
        own = source[request.held[0]:cdiv(end, size)]
        if not failed:  # the import's full pages are written: durable, to be published
            self.durable |= set(own[:end // size - request.held[0]])
            if request.held[0] > end // size:  # a kept hit block holds its partial last page
                self.rewrite[rid] = (end // size, source[end // size])
        else:  # allowed, never required: the coordinator is not told which pages arrived
            self.unconfirmed |= set(own[:valid // size - request.held[0]])
            self.unready[rid] = request.hit // size
        if valid == 0:
            self.count(IMPORT_FREED)
            self.import_freeing(rid)
            yield Call(f"free(r{rid}): its import failed", "free", (rid, False), oracle=None)
            self.freed(rid)
            request.computed, request.status = 0, WAITING
            yield Call("", "set_computed", (rid, 0, "waiting"), oracle=None)
            return
        self.count(IMPORT_FAILED if failed else IMPORT_DONE)
        request.computed = valid
        yield Call("", "set_computed", (rid, valid, LOADING), oracle=None)
        yield Call(f"cache_blocks(r{rid}, {valid})", "cache_blocks", (rid, valid), oracle=None)
        self.imported(rid, valid)  # its cached count (`hisparse_caching.py`)
        restores = yield Call("", "hisparse_planned", (), oracle=None, compare=state_read)
        pairs = self.received(rid, restores.actual, restore=True)
        self.planned += pairs
        self.restores |= {tid for tid, _ in pairs}  # host -> device: no write
        self.owners.update((tid, op.rid) for tid, _ in pairs)
        # (its cache_blocks came after `finish_host_import` planned the restore: that page has
        # a transfer in flight, and no copy recorded by it)
        self.published_by(rid, valid // size)
        if valid == len(request.tokens):  # the last token is computed again for its logits
            request.computed -= 1
        request.status = WAITING
        yield Call("", "set_computed", (rid, request.computed, "waiting"), oracle=None)

    def _resume(self, rid, request, chunk):
        """The first allocation of a request whose import is reported: waiting, with computed
        tokens, no lookup (the scheduler's `else` branch of an admission)."""
        self.count(RESUMED)
        new = min(chunk, len(request.tokens) - request.computed)
        others = any(r.status == RUNNING for o, r in self.requests.items() if o != rid)
        whole = self.trace.full_sequence_must_fit
        if new == 0:  # no slots and nothing to adopt: the caller's bug, refused
            self.count("allocate_slots of nothing refused")

            def refuse():
                raise NothingToAllocate(f"r{rid}: no new tokens after its import")
            yield Call(f"allocate_slots(r{rid}, 0) after its import", "resume",
                       (rid, 0, others, whole), oracle=refuse)
            return []
        got = yield Call(f"allocate_slots(r{rid}, {new}) after its import", "resume",
                         (rid, new, others, whole), oracle=None, compare=allocation_problems)
        if got.actual is None:
            self.count("allocate_slots refused")
            return self._resume_refusal(rid, request, request.computed + new, others)
        return (yield from self._stepped(rid, request, new, got.actual))


def _head(actual):
    """The connector's lookup without its divergence flag: `get_computed_blocks`' answer."""
    try:
        return tuple(actual[:3])
    except TypeError:
        return actual
