"""The prefix-cache judge on the shared lock step (`kvfuzz.fuzz.engine.lockstep`): the oracle
(`oracle.radix`) and an implementation driven as SGLang's scheduler drives its tree cache and
allocator (admission: match, lock, row; extend: evict the shortfall, allocate; checkpoints;
release; probes, load-back inserts, evictions, flushes). This module holds the op handlers, the
events they count and the plans they follow (`rows_needed`, `extend_plan`); the calls' results
(match lengths and slots, evicted tokens, refusals, insert's cached length) are compared in
`results.py`, and after every op the state is read and set against the invariants and the model
in `reads.py` (light reads between whole ones, `FULL_EVERY`) and `state.py`.
"""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import POISON, Call, Lockstep, handles, short
from kvfuzz.fuzz.engine.remote import make
from kvfuzz.fuzz.radix.reads import TreeReads
from kvfuzz.fuzz.radix.results import alloc_compare, evict_compare, match_compare, refusal_allowed
from kvfuzz.oracle.radix.contract import CURRENT
from kvfuzz.oracle.radix.events import EventLedger
from kvfuzz.oracle.radix.model import RadixModel
from kvfuzz.oracle.radix.pages import PageNames
from kvfuzz.strategies.radix import trace as radix
from kvfuzz.strategies.radix.trace import (Admit, Checkpoint, Evict, Extend, Finish, Insert, Match,
                                           Pin, Reset, Touch)


def rows_needed(trace) -> tuple[int, int]:
    """(the most requests live at once, the longest request): the rows table's shape."""
    seen, live, most = set(), set(), 1
    for op in trace.ops:
        if isinstance(op, Admit) and op.rid not in seen:
            seen.add(op.rid)
            live.add(op.rid)
            most = max(most, len(live))
        elif isinstance(op, Finish):
            live.discard(op.rid)
        elif isinstance(op, Reset):
            live.clear()
    longest = max((len(op.tokens) for op in trace.ops if isinstance(op, Admit)), default=1)
    return most, longest


class RadixLockstep(TreeReads, Lockstep):
    KINDS = radix.KINDS
    # What every radix trace can reach (a pure-SWA cache's window adds its own: window.py)
    TREE_EVENTS = ("admit with a hit", "admit, no hit", "admit splits a node", "prefill chunk",
              "decode", "decode into a new page", "alloc refused", "evict for an allocation",
              "evict", "evict nothing", "evict all", "checkpoint", "checkpoint frees duplicates",
              "finish cached", "finish not cached", "finish after a reset", "match hit",
              "match miss", "match splits a node", "touch", "pin", "insert", "insert cached part",
              "insert refused", "reset", "reset in flight", "key under a page")
    EVENTS = TREE_EVENTS
    OWNERSHIP = (f"{POISON} is what the caller wrote over the tensor, key or row it passed, "
                 f"after the call: the cache kept the caller's, not a copy")
    # The driver's call that evicts for an allocation (the scheduler's evict_to_free_tokens).
    ALLOC_EVICT = "evict"
    # Whether the caller of `insert` frees the slots of what the tree already had (RadixCache)
    # or the cache does (UnifiedRadixCache: `[prev_prefix_len, cached)` of the value).
    CALLER_FREES_DUPLICATES = True
    # Whether a load-back hands `insert` one slot a token, a partial last page's too (RadixCache:
    # `insert` page-aligns the key and cuts the value to it, so the caller keeps and frees that
    # page), or only the whole pages' slots (the unified target's load-back, as it was).
    VALUE_COVERS_PARTIAL_PAGE = True
    MODEL = RadixModel

    def build_model(self, trace):
        self.names = PageNames()
        self.ledger = EventLedger(self.names)
        self.seen: set[int] = set()
        self.pages_before = None  # the implementation's pages after the last op
        self.expected_before = None  # the model's
        self.nodes_before = None  # and its nodes
        self.before_views = None  # the model's nodes after the last op, where it was light
        self.evicting = False
        self.contract = self.options.get("contract", CURRENT)
        # whether the cache publishes KV events: the trace's switch, unless it publishes none
        # whatever the switch (contract.py: SGLang 0.5.11's unified cache)
        self.events_on = trace.events and self.contract.kv_events
        if self.contract is CURRENT:  # (the unified model takes no contract)
            return self.MODEL(trace.page_size, trace.size, trace.policy)
        return self.MODEL(trace.page_size, trace.size, trace.policy, self.contract)

    def build_impl(self, trace, cls, device, poison_keys: bool = True, contract=None):
        from kvfuzz.impl.radix.driver import RadixDriver  # imports torch and SGLang

        rows, context = rows_needed(trace)
        return make(RadixDriver, cls, trace.page_size, trace.size, trace.policy, trace.events,
                    rows, context, device, poison_keys)

    def initial_problems(self):
        return self.state(None)

    # -- ops ----------------------------------------------------------------------------------
    @handles(Admit)
    def admit(self, op: Admit):
        if op.rid in self.seen:
            return
        self.seen.add(op.rid)
        self._count_match(op.tokens[:op.prompt - 1], op.ns, "admit with a hit", "admit, no hit",
                          "admit splits a node")
        yield Call(f"r{op.rid}: match_prefix(prompt of {op.prompt}, limit {op.prompt - 1})",
                   "admit_match", (op.rid, op.tokens, op.prompt, op.ns, op.priority),
                   compare=match_compare)
        yield Call(f"lock r{op.rid}'s node", "admit_lock", (op.rid,))

    @handles(Extend)
    def extend(self, op: Extend):
        request, model = self.model.requests.get(op.rid), self.model
        if request is None or request.stale:
            return
        plan = extend_plan(request, op.count, model.page_size)
        if plan is None:
            return
        (count, decode, demand), ps = plan, model.page_size
        self.count("decode" if decode else "prefill chunk")
        if decode and request.filled % ps == 0:
            self.count("decode into a new page")
        if demand > model.available_size():
            yield from self._evict(demand - model.available_size(), "evict for an allocation",
                                   self.ALLOC_EVICT)
        result = yield Call(f"{'alloc_decode' if decode else 'allocate'} {count} slots for "
                            f"r{op.rid} (at {request.filled})", "extend",
                            (op.rid, count, decode), oracle=lambda: model.extend(op.rid, count),
                            compare=alloc_compare)
        if result.actual is None:
            self.count("alloc refused")
            return
        problems = self._fresh(result.actual, request.row[-1:] if request.filled % ps else [])
        model.grant(op.rid, result.actual)
        return problems

    @handles(Checkpoint)
    def checkpoint(self, op: Checkpoint):
        request = self.model.requests.get(op.rid)
        if request is None or request.stale:
            return
        yield from self._checkpoint(op.rid, request)

    def _checkpoint(self, rid: int, request, finishing: bool = False):
        self.count("checkpoint")
        if self.model.tree.peek(request.ns, request.tokens[:request.filled])[0] > \
                request.protected:
            self.count("checkpoint frees duplicates")  # cached since its match: not its own
        # before 0.5.22 a finish is a call of its own (cache_finished_req): the driver is told
        legacy_finish = finishing and self.contract.legacy
        yield Call(f"{'finish' if legacy_finish else 'checkpoint'}(r{rid}, up_to="
                   f"{request.filled}) -> cache_protected_len", "checkpoint",
                   (rid, True) if legacy_finish else (rid,), compared=True)

    @handles(Finish)
    def finish_request(self, op: Finish):
        request = self.model.requests.get(op.rid)
        if request is None:
            return
        if request.stale:
            self.count("finish after a reset")
            yield Call(f"r{op.rid}: unlock of its lock from before the reset", "release_stale",
                       (op.rid,), compare=refusal_allowed)
            return
        self.count("finish cached" if op.cache else "finish not cached")
        if op.cache:
            yield from self._checkpoint(op.rid, request, finishing=True)
        yield Call(f"release r{op.rid}: free_kv_row([{request.protected}, {request.filled})), "
                   f"unlock", "release", (op.rid, op.cache))

    @handles(Match, Touch, Pin)
    def probe(self, op):
        name = radix.NAMES[type(op)]
        if isinstance(op, Match):
            self._count_match(op.tokens, op.ns, "match hit", "match miss", "match splits a node")
        else:
            self.count(name)
        yield Call(f"{name}({short(list(op.tokens), 40)})", name, (op.tokens, op.ns),
                   compare=match_compare if isinstance(op, Match) else None,
                   compared=isinstance(op, Pin))

    @handles(Insert)
    def insert(self, op: Insert):
        model = self.model
        key = model.tree.aligned(op.tokens)
        ps = model.page_size
        self.count("insert")
        if len(key) < len(op.tokens):
            self.count("key under a page")
        # What the caller allocates and hands over: whole pages for every token (its row, a
        # partial last page too) or, where the value covers whole pages only, the key's pages.
        covered = len(op.tokens) if self.VALUE_COVERS_PARTIAL_PAGE else len(key)
        need = -(-covered // ps) * ps
        slots, pages = [], []
        if need:
            if need > model.available_size():
                yield from self._evict(need - model.available_size(),
                                       "evict for an allocation", self.ALLOC_EVICT)
            got = yield Call(f"alloc({need}) for the insert", "alloc_slots", (need,),
                             oracle=lambda: model.alloc_slots(need), compare=alloc_compare)
            if got.actual is None:
                self.count("insert refused")
                return
            problems = self._fresh(got.actual, [])
            if problems:
                return problems
            model.take(got.actual)
            pages, slots = got.actual, got.actual[:covered]
        done = yield Call(f"insert({short(key, 40)}, its {len(slots)} slots) -> "
                          f"cached length", "insert", (op.tokens, op.ns, op.priority, slots),
                          compared=True)
        if done.expected:
            self.count("insert cached part")
        if done.expected and self.CALLER_FREES_DUPLICATES:
            yield Call(f"free the {done.expected} duplicate slots", "free_slots",
                       (slots[:done.expected],))
        if len(pages) > len(key):  # the partial page insert does not cache: still the caller's
            yield Call(f"free the partial page's slots {pages[len(key)]}..{pages[-1]}",
                       "free_slots", (pages[len(key):],))

    @handles(Evict)
    def evict(self, op: Evict):
        evictable = self.model.tree.evictable_size()
        num = max(0, evictable + op.count) if op.relative else op.count
        yield from self._evict(num, "evict nothing" if not evictable else "evict all"
                               if num >= evictable else "evict")

    def _evict(self, num: int, event: str, method: str = "evict"):
        self.count(event)
        self.evicting = True
        evictable = self.model.tree.evictable_size()
        yield Call(f"{method}({num}) -> tokens evicted", method, (num,),
                   oracle=lambda: self.model.evict(num),
                   compare=lambda expected, rejected, actual, raised:
                   evict_compare(num, evictable, expected, actual, raised))

    @handles(Reset)
    def reset(self, op: Reset):
        in_flight = any(not r.stale for r in self.model.requests.values())
        self.count("reset in flight" if in_flight else "reset")
        yield Call("reset(); allocator.clear(); rows cleared", "reset")

    # -- what every op checks -----------------------------------------------------------------
    def _count_match(self, tokens, ns: int, hit: str, miss: str, splits: str) -> None:
        tree = self.model.tree
        if len(tree.aligned(tokens)) < len(tokens):
            self.count("key under a page")
        found, splitting = tree.peek(ns, tokens)
        self.count(hit if found else miss)
        if splitting:
            self.count(splits)

    def _fresh(self, slots, partial_page) -> list[tuple[str, str]]:
        """New slots come from free pages (or the request's own partial page)."""
        ps, model = self.model.page_size, self.model
        own = {s // ps for s in partial_page}
        taken = sorted({s // ps for s in slots} - own - model.free)
        if taken:
            return [("alloc", f"slots of page {taken[0]} handed out, which is not free "
                              f"({len(taken)} such pages)")]
        return []


def extend_plan(request, asked: int, page_size: int) -> tuple[int, bool, int] | None:
    """(the tokens an extend allocates, whether it is a decode step, what SGLang evicts for
    first), or None when the request has nothing left to extend: an extend stops at the
    prompt's end. The demand: the tokens at page size 1; above it, a page more for an extend, a
    page for a decode step (allocation.py's conservative counts, one request)."""
    end = request.prompt if request.filled < request.prompt else len(request.tokens)
    count = min(asked, end - request.filled)
    if count <= 0:
        return None
    decode = request.filled >= request.prompt and count == 1
    return count, decode, count if page_size == 1 else page_size if decode else count + page_size
