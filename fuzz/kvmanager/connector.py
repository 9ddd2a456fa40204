"""The KV-cache-manager judge's handlers of the KV-connector ops (`connect`, `loaded`), mixed
into `KVManagerLockstep` (whose requests, model and allocation checks they use), and the
connector's properties, judged from the implementation's own answers after every op:

- external tokens get blocks of their own: after an admission with external tokens, each
  group's table past the adopted hit up to the computed tokens holds real blocks (no null
  block, unless the window skips them) that no other live request holds and the hit did not
  bring; and as many as the oracle's rule names in the group's own block size
  (`external_cover`: cdiv(hit + external, size), exactly for a load, at least with a step's
  slots), so a group of other-sized blocks neither stops short nor runs past them;
- beside a Mamba group in mode "none" or "all" (caching off), its table null below the last
  computed token's state, that state's block the request's own (`mamba_plain.py`);
- nothing is cached before the load is reported: while a request's asynchronous load is in
  flight, none of those blocks carries a hash in the pool;
- what is recorded for zeroing is what the contract names (`take_new_block_ids` against the
  oracle's records: the new attention blocks, the external ones unless their load writes them,
  and a failed load's blocks from its valid prefix on), drained every op as the scheduler does.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, crash_problems, handles, short
from kvfuzz.fuzz.kvmanager import mamba_plain
from kvfuzz.fuzz.kvmanager.connector_cap import EVENTS as CAP, ConnectorCap
from kvfuzz.fuzz.kvmanager.connector_cap import cap_text, capped_args, lookup_cap
from kvfuzz.fuzz.kvmanager.cut import skip_output
from kvfuzz.oracle.kvmanager.hybrid import cdiv
from kvfuzz.oracle.kvmanager.model import NothingToAllocate
from kvfuzz.strategies.kvmanager.connector_ops import EVERY_GROUP, Connect, Loaded

LOADING = "loading"  # a request whose asynchronous KV load is in flight
EVENTS = ("connector admission", "connector admission, asynchronous load",
          "connector admission with a hit", "external tokens: the whole prompt",
          "connector admission refused", "load refused with blocks reserved",
          "load done", "load failed, a prefix valid", "load failed, nothing valid (freed)",
          "a whole prompt loaded: its last token recomputed", "resumed after its load",
          "zeroing records compared", "blocks recorded for zeroing again",
          "external tokens outside the window", "load of some groups only")
# Over groups of different block sizes (the "connector sizes" profile alone reaches them)
SIZES_EVENTS = ("external tokens, groups of different block sizes",
                "external tokens ending inside a larger group's block",
                "load of some groups only, groups of different block sizes")
EVENTS += SIZES_EVENTS
# A prompt of one token loaded whole counts 0 computed tokens after its load (its last token
# recomputed), so the scheduler looks it up again (and asks the connector again) while it
# holds its blocks (`relooked`)
RELOOKUP = "one-token prompt loaded whole, looked up again"
EVENTS += (RELOOKUP,)
# Under asynchronous scheduling (the "async connector" profile alone reaches them)
ASYNC_EVENTS = ("load reported with other requests' steps in flight",
                "synchronous load, its step in flight")
# a synchronous load's failed block reported with its admission step's output while the
# request's next step is in flight (`_sync_load_failed`; since 2026-12-06)
SYNC_CUT_IN_FLIGHT = "synchronous load failed beneath a step in flight"
# then a chunk that takes the admission step's unresolved output placeholder too (`ghost`)
GHOST_SCHEDULED = "chunk past the tokens: a failed load's output placeholder"
ASYNC_EVENTS += (SYNC_CUT_IN_FLIGHT, GHOST_SCHEDULED)
EVENTS += ASYNC_EVENTS
# a synchronous load's failure right after its admission, and an asynchronous load's failed
# block inside its local hit (the "connector cuts" profile makes them)
SYNC_FAILED = "synchronous load failed at a block: its request cut"
INSIDE_HIT = "load failed at a block inside its local hit"
# and under the V2 runner's pipeline one beneath both steps after the admission (2026-12-06)
SYNC_CUT_TWO_IN_FLIGHT = "synchronous load failed beneath two steps in flight"
EVENTS += (SYNC_FAILED, INSIDE_HIT, SYNC_CUT_TWO_IN_FLIGHT, *CAP)  # (CAP: the caller's cap)
# beside a Mamba group in mode "none" or "all" (the "mamba plain connector" profile alone)
EVENTS += mamba_plain.EVENTS


class ConnectorOps(ConnectorCap):
    """Mixed into `KVManagerLockstep`."""

    # Under the guard the engine's scheduler takes the zeroing records itself
    # (`guard_zeroing.py`): the lock step then compares them without emptying either list, and
    # a failed load's `record_blocks_for_zeroing` is the engine's next call, owed until made.
    zeroing_read_only = False
    zeroing_owed: tuple[int, int] | None = None

    @handles(Connect)
    def connect(self, op: Connect):
        request, trace, model = self.requests.get(op.rid), self.trace, self.model
        # A fresh admission only. A Mamba "align" group's connector ops are judged in its
        # reduced mode (`align_external.py`): the full "align" oracle is not modelled. Beside a
        # Mamba group in mode "none" or "all" (caching off: no hit, no divergence, no boundary
        # state) they are judged here since 2026-12-08: the group's table after c computed
        # tokens is (c - 1) // b nulls and the last state's block (`skipped_tokens`). Cross
        # attention is not constructible with one: vLLM 0.33.0's scheduler asserts it
        # away (`Scheduler.__init__`, sched/scheduler.py line 176: "Encoder-decoder models are
        # not currently supported with KV connectors"), and `CrossAttentionManager.
        # allocate_external_computed_blocks` returns at once.
        if request is None or request.status != "waiting" or request.computed or \
                trace.mamba_mode == "align" or trace.encoder_tokens:
            return
        rid, tokens = op.rid, request.tokens
        kept = self.relooked(request, rid)
        cap = lookup_cap(op.max_hit, len(tokens))  # (the caller's: `connector_cap.py`)
        expected = model.get_computed_blocks(self._hashes(request), len(tokens), tokens,
                                             request.skip, trace.report, cap=cap)
        # Without a Mamba group the connector's lookup is `get_computed_blocks`'s, its hit
        # never diverging.
        yield Call(f"get_computed_blocks_for_connector(r{rid}{cap_text(cap)}) -> "
                   f"{short(expected, 60)}", "connector_lookup", capped_args(rid, cap),
                   oracle=lambda: (*expected, False),
                   compare=self._lookup_compare)
        hit_blocks, hit, request.boundary = expected
        self._count_marks()
        # the connector holds tokens past the hit: all the request's for a load, all but the
        # last for a synchronous one (the scheduler computes at least one token)
        room = len(tokens) - hit - (0 if op.load else 1)
        external = self.capped_external(cap, hit, 0 if request.skip else
                                        max(0, min(op.external, room)), model.sizes[0])
        load = op.load and external > 0
        new = 0 if load else min(op.chunk, len(tokens) - hit - external)
        # a synchronous load's last token padded with placeholder drafts (an asynchronous
        # load's admission computes nothing: the scheduler never pads it)
        rows = 0 if load else self._padded(len(tokens) - hit - external, hit + external,
                                           op.chunk, op.pad, "under a connector")
        new += rows
        held = self.rows_held(rows, op.rows_in_flight)  # (as a padded `schedule` admission's)
        self.count("connector admission, asynchronous load" if load else "connector admission")
        if hit:
            self.count("connector admission with a hit")
        if external and hit + external == len(tokens):
            self.count("external tokens: the whole prompt")
        if external:
            self._count_sizes(hit + external)
        reserve = op.reserve if load else 0
        yield Call(f"allocate_slots(r{rid}, {new}, hit {hit}, external {external}"
                   f"{', delayed caching' if load else ''}"
                   f"{f', {reserve} reserved' if reserve else ''})"
                   f"{f': {rows} placeholder drafts' if rows else ''}")
        got, problems = yield from self._connect_allocation(rid, request, new, hit, hit_blocks,
                                                            external, load, reserve, op.written,
                                                            rows, held)
        if got is None or problems:
            return problems
        request.hit = hit
        # (after a whole load of one token, the blocks it kept are not the new load's own:
        # the release adopts nothing and allocates nothing for them)
        request.held = [max(self._own_start(group, hit_blocks, hit + external), kept[group])
                        for group in range(len(model.sizes))]
        tables = self.read("block_ids", rid)
        problems = self._own_blocks(rid, request.held, hit + external, tables) or \
            self._covered(rid, tables, hit + external, external, load)
        if external and mamba_plain.plain_mamba(trace):
            problems = problems or mamba_plain.admitted(self.count, trace, rid, tables,
                                                        hit + external, load)
        if load:
            request.status, request.in_flight = LOADING, 0
            yield Call("", "set_computed", (rid, request.computed, LOADING), oracle=None)
        elif external:
            request.sync_load = (hit, hit + external, request.computed)
            if trace.async_scheduling and request.in_flight:
                self.count("synchronous load, its step in flight")
        return problems

    def _connect_allocation(self, rid, request, new, hit, hit_blocks, external, load, reserve,
                            written=EVERY_GROUP, placeholders=0, rows_in_flight=False):
        """The admission's allocate_slots on both sides: its result (None when refused) and
        the problems of what it consumed. `placeholders`: padded draft rows among the `new`
        tokens, rejected at the step's output (the request counts the rest computed)."""
        model, trace = self.model, self.trace
        before = (yield Call("", "num_free", oracle=None, compare=state_read)).actual
        others = any(r.status == "running" for other, r in self.requests.items() if other != rid)
        whole = trace.full_sequence_must_fit
        groups = range(len(model.sizes))
        # the groups an asynchronous load writes are left out of zeroing (a load of some
        # groups only: the others' external blocks are zeroed)
        written = set(groups) if written == EVERY_GROUP else \
            {g for g in groups if written >> g & 1}
        zero_external = frozenset(groups) - written if load else True
        args = (rid, new, hit, external, load, reserve, whole, others)
        if load and written != set(groups):
            self.count("load of some groups only")
            if len(set(model.sizes)) > 1:
                self.count("load of some groups only, groups of different block sizes")
            args += (tuple(sorted(written)),)
        try:
            expected = model.allocate_slots(
                rid, self._hashes(request), len(request.tokens), 0, new, hit, hit_blocks, whole,
                request.prompt, request.boundary, others, request.tokens, 0, external=external,
                delay=load, reserve=reserve, zero_external=zero_external,
                lookahead=0 if load else None)
        except NothingToAllocate as refused:
            self.count("allocate_slots of nothing refused")

            def refuse():
                raise refused
            yield Call("", "connect", args, oracle=refuse, compare=self._allocation_compare)
            return None, []
        self._count_marks()
        yield Call("", "connect", args, oracle=lambda: expected,
                   compare=self._allocation_compare)
        if expected is None:
            self.count("load refused with blocks reserved" if reserve else
                       "connector admission refused")
            return None, []
        after = (yield Call("", "num_free", oracle=None, compare=state_read)).actual
        if before - after != model.predicted:
            return expected, [("invariant", f"allocate_slots consumed {before - after} free "
                                            f"blocks, its check counted {model.predicted}")]
        counted = 0 if rows_in_flight else placeholders  # rolled back at once, or at the output
        request.computed = hit + external + new - counted
        request.status, request.in_flight = "running", new - counted
        yield Call("", "set_computed", (rid, request.computed, "running"), oracle=None)
        if trace.stats:  # the scheduler records the local hit of an admission made
            self.count("stats recorded")
            yield Call("", "record_stats", (rid, hit), oracle=lambda: model.
                       record_prefix_cache_stats(len(request.tokens), hit, request.preempted,
                                                 request.skip))
        return expected, []

    @handles(Loaded)
    def loaded(self, op: Loaded):
        request, model = self.requests.get(op.rid), self.model
        if request is not None and request.status == "running" and op.valid >= 0 and \
                request.sync_load and (request.sync_load[2] == request.computed or
                                       self._beneath(request)):
            return (yield from self._sync_load_failed(op, request))
        if request is None or request.status != LOADING:
            return
        rid, hashes = op.rid, self._hashes(request)
        size = self.trace.scheduler_block_size
        if self.trace.async_scheduling and any(
                r.status == "running" and r.in_flight for r in self.requests.values()):
            self.count("load reported with other requests' steps in flight")
        # a failed load's valid tokens: to the first failed block's start, at or past the
        # local hit (the scheduler's `_update_requests_with_invalid_blocks`), or below it where
        # the failed block is one of the hit's (`inside_hit`)
        floor = 0 if op.inside_hit else request.hit // size * size
        valid = op.valid if op.valid <= 0 else \
            max(floor, min(op.valid, request.computed) // size * size)
        if op.inside_hit and 0 < valid < request.hit // size * size:
            self.count(INSIDE_HIT)
        if valid == 0:  # nothing valid: the request's blocks go, it is admitted again
            self.count("load failed, nothing valid (freed)")
            yield Call(f"free(r{rid}): its load failed", "free", (rid, False),
                       oracle=lambda: model.free(rid))
            request.computed, request.status = 0, "waiting"
            yield Call("", "set_computed", (rid, 0, "waiting"), oracle=None)
            return
        if valid > 0:
            request.computed = valid
            self.count("load failed, a prefix valid")
            yield Call("", "set_computed", (rid, request.computed, LOADING), oracle=None)
        else:
            self.count("load done")
        computed = request.computed
        yield Call(f"cache_blocks(r{rid}, {computed})", "cache_blocks", (rid, computed),
                   oracle=lambda: model.cache_blocks(rid, hashes, computed, request.tokens,
                                                     request.prompt, request.boundary))
        if valid > 0 and self.trace.zeroing:
            self.count("blocks recorded for zeroing again")
            if self.zeroing_read_only:
                self.zeroing_owed = (rid, computed)
            yield Call(f"record_blocks_for_zeroing(r{rid}, {computed})",
                       "record_blocks_for_zeroing", (rid, computed),
                       oracle=lambda: model.record_blocks_for_zeroing(rid, computed))
        if computed == len(request.tokens):  # the last token is computed again for its logits
            self.count("a whole prompt loaded: its last token recomputed")
            request.computed -= 1  # (one token: 0 computed, its blocks held: `relooked`)
        request.status = "waiting"
        yield Call("", "set_computed", (rid, request.computed, "waiting"), oracle=None)

    def _sync_load_failed(self, op: Loaded, request):
        """A synchronous load failed, reported in the step of its admission: the scheduler
        (`_update_requests_with_invalid_blocks`, "recompute" policy) cuts the request's
        computed tokens to its first failed block, at or past the local hit, and skips its
        output; the manager is not called (the blocks stay, cached: they are recomputed)."""
        hit, end, after = request.sync_load
        size = self.trace.scheduler_block_size
        beneath = self._beneath(request)
        self.count(SYNC_FAILED)
        if beneath or (self.trace.async_scheduling and not request.in_flight):
            # The failure comes with the admission step's output (processed: nothing of the
            # request in flight, or its next step alone), which vLLM then skips
            # (`update_from_output`'s `failed_kv_load_req_ids`): its sampled token is dropped
            # and, where that step sampled, its output placeholder is never resolved (`ghost`);
            # the step in flight samples, a `sample` over fewer computed tokens (`owed`): as
            # any failed block's cut under this scheduler (`cut.skip_output`)
            skip_output(request)
        else:
            request.owed = 0
        request.computed = max(hit // size * size, min(op.valid, end) // size * size)
        if beneath:  # the next step stays in flight, counted as vLLM counts it
            self.count(SYNC_CUT_IN_FLIGHT)
            if len(request.flights) > 1:  # (a pipeline's two)
                self.count(SYNC_CUT_TWO_IN_FLIGHT)
        else:
            request.in_flight = 0
        request.sync_load = None
        yield Call("", "set_computed", (op.rid, request.computed, "running"), oracle=None)

    def _beneath(self, request) -> bool:
        """Whether a failed synchronous load is reported beneath the request's next step
        (asynchronous scheduling: the admission's step output comes after the next step is
        scheduled), that step's tokens in flight, begun where the admission ended."""
        return self.trace.async_scheduling and request.in_flight > 0 and \
            request.computed > request.sync_load[2] == request.computed - request.in_flight

    def relooked(self, request, rid: int) -> list[int]:
        """An admission's lookup of a request: where it is a one-token prompt loaded whole
        (the scheduler's `num_computed_tokens == 0` branch, its blocks still held: the
        coordinator then treats it as running, no hit adopted, no block for external tokens
        it already holds), the edge class counted; each group's blocks it holds. A waiting
        request with no computed token holds blocks only then: a failed load with nothing
        valid and a preemption free it."""
        kept = [len(self.model.tables[group].get(rid, ()))
                for group in range(len(self.model.sizes))]
        if any(kept):
            self.count(RELOOKUP)
        return kept

    # -- the properties -----------------------------------------------------------------------
    def _own_start(self, group: int, hit_blocks, computed: int) -> int:
        """Where a group's blocks past the adopted hit start: past its skipped blocks and the
        hit's."""
        size = self.model.sizes[group]
        return max(self.model.skipped_tokens(group, computed) // size, len(hit_blocks[group]))

    def _count_sizes(self, computed: int) -> None:
        """The edge classes of external tokens over groups of different block sizes."""
        sizes = set(self.model.sizes)
        if len(sizes) > 1:
            self.count("external tokens, groups of different block sizes")
            if computed % max(sizes) and not computed % min(sizes):
                self.count("external tokens ending inside a larger group's block")

    def _covered(self, rid: int, tables, computed: int, external: int,
                 load: bool) -> list[tuple[str, str]]:
        """Each group's table (read from the implementation) holds the blocks the oracle's
        rule names for the external tokens, in the group's own block size: exactly so after
        an asynchronous load's admission (no slots past them), at least so after a
        synchronous one (its step's slots follow). A Mamba group in mode "none" or "all" holds
        its speculative blocks past them too (the release adds them to every allocation, an
        asynchronous load's of no new tokens included: `MambaManager.allocate_new_blocks`)."""
        for group, table in enumerate(tables):
            want = self.model.external_cover(group, computed, external)
            if want is not None and group == self.model.second:
                want += self.model.speculative
            if want is not None and (len(table) < want or load and len(table) != want):
                return [("external blocks", f"r{rid} group {group}: {len(table)} blocks of "
                                            f"{self.model.sizes[group]} tokens after "
                                            f"{computed} computed tokens ({external} "
                                            f"external), expected {want}")]
        return []

    def _own_blocks(self, rid: int, starts, computed: int, tables=None) -> list[tuple[str, str]]:
        """External tokens' blocks are the request's own (read from the implementation): not
        null, not another live request's, not a block the hit brought (a hit block the window
        skipped was never taken: it may come back as a new one)."""
        tables = self.read("block_ids", rid) if tables is None else tables
        others = {b for other in self.requests if other != rid
                  for group in self.read("block_ids", other) for b in group}
        for group, (size, start) in enumerate(zip(self.model.sizes, starts)):
            ours, adopted = tables[group][start:cdiv(computed, size)], tables[group][:start]
            shared = [b for b in ours if not b or b in others or b in adopted]
            if shared:
                return [("external blocks", f"r{rid} group {group}: blocks {short(ours)} for "
                                            f"its external tokens; {short(shared)} null, held "
                                            f"by another request or adopted from the hit")]
        return []

    def connector_problems(self) -> list[tuple[str, str]]:
        """After every op: nothing cached of a load in flight; the zeroing records."""
        problems, model = [], self.model
        loading = [rid for rid, r in self.requests.items() if r.status == LOADING]
        if loading:
            keys = self.read("keys")
            for rid in loading:
                for group, blocks in enumerate(self.read("block_ids", rid)):
                    own = blocks[self.requests[rid].held[group]:]
                    cached = [b for b in own if b and keys[b] is not None]
                    if cached:
                        problems.append(("cached before the load", f"r{rid}'s load is in "
                                         f"flight; group {group}'s blocks {short(cached)} "
                                         f"already cached"))
        return problems + self.zeroing_problems()

    def zeroing_problems(self) -> list[tuple[str, str]]:
        """The zeroing records against the oracle's: taken from both, as the scheduler drains
        them every step; under the guard read without emptying them (the engine's scheduler
        takes them), and not while a record the engine makes next is owed."""
        if not self.trace.zeroing or self.zeroing_owed is not None:
            return []
        self.count("zeroing records compared")
        if self.zeroing_read_only:
            expected = self.model.new_block_ids()
            actual, what = self.read("pending_new_block_ids"), "new_block_ids"
        else:
            expected = self.model.take_new_block_ids()
            actual, what = self.read("take_new_block_ids"), "take_new_block_ids"
        if actual != expected:
            return [("zeroing", f"{what}: expected {short(expected)}, actual {short(actual)}")]
        return []

    def _lookup_compare(self, expected, rejected, actual, raised) -> list:
        """The connector's lookup: `get_computed_blocks`' answer, then the divergence flag."""
        problems = self._hit_compare(expected[:3], rejected, _head(actual), raised)
        if problems or raised is not None:
            return problems
        return [] if actual[3] == expected[3] else [
            ("prefix hit", f"get_computed_blocks_for_connector: hit_diverged expected "
                           f"{expected[3]}, actual {actual[3]}")]


def _head(actual):
    try:
        return tuple(actual[:3])
    except TypeError:
        return actual


def state_read(expected, rejected, actual, raised) -> list:
    return crash_problems(raised, "state read") if raised is not None else []
