"""The unified judge for a cache with the SWA component ("full+swa" traces, `unified-swa/1`): the
same ops and calls as the full-attention judge (`lockstep.py`, `fuzz/radix/lockstep.py`, whose
checkpoint and finish handlers it inherits), with the scheduler's tables kept from the
implementation's own answers, since the radix model does not model which nodes the SWA component
splits, tombstones or evicts first. After every op it checks
what the SWA contract promises (`swa_state.py`, from `oracle.unified.swa`): each node's SWA slots
against its full slots, both pools conserved, the sizes with their sign, `total_size()`, a
match's length against the deepest node with a live window, a checkpoint's out-of-window cursor,
an eviction freeing at least the shortfall; the tree's shape (`tree_violations`, lock counts
monotone among it), aliasing and kept tensors as for full attention; from the nodes before and
after the op, only unlocked leaves gone and a pin's lock counts back at their baseline (with no
model of the locks here, these and the monotone counts are all that judge them); and, on the Rust core, the Python core run beside it through
the whole public state, SWA slots and free lists included (`twin.py`). The target's judge is
`ByComponents` (`judges.py`): this one for a trace with a window."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvfuzz.fuzz.engine.lockstep import Call, handles, short
from kvfuzz.fuzz.engine.transcript import recording
from kvfuzz.fuzz.radix import state as radix_state
from kvfuzz.fuzz.radix.lockstep import extend_plan
from kvfuzz.fuzz.unified import state
from kvfuzz.fuzz.unified.lockstep import CURSOR, TOMBSTONE, WINDOW_CUT, UnifiedLockstep
from kvfuzz.fuzz.unified.swa_state import (key_namespace, match_problems, pin_problems,
                                           swa_problems)
from kvfuzz.fuzz.unified.twin import twin_problems
from kvfuzz.oracle.radix.contract import CURRENT
from kvfuzz.oracle.radix.invariants import tree_violations
from kvfuzz.oracle.unified.swa import checkpoint_cursor
from kvfuzz.strategies.radix.trace import Admit, Evict, Extend, Insert, Match, Pin, Reset, Touch


@dataclass
class Held:
    """A live request as the scheduler sees it: its tokens, how far it is filled."""

    tokens: tuple
    prompt: int
    ns: int
    filled: int = 0
    protected: int = 0
    stale: bool = False


@dataclass
class Book:
    """The scheduler's tables: no model of the tree. The radix judge's finish (inherited) asks
    it to release and to drop a stale lock as it asks the model."""

    page_size: int
    window: int
    requests: dict = field(default_factory=dict)

    def release(self, rid: int, checkpointed: bool = True) -> None:
        del self.requests[rid]

    def release_stale(self, rid: int) -> None:
        del self.requests[rid]


class SWALockstep(UnifiedLockstep):
    LIGHT = False  # the SWA and Mamba reads are whole, after every op (their own `state`)

    def build_model(self, trace):
        self.seen, self.snap, self.probed, self.cursor = set(), None, None, None
        self.pinned, self.evicting = None, False
        # the calls of the release (oracle/radix/contract.py): before 0.5.22 a finish is a call
        # of its own, which the driver must be told
        self.contract = self.options.get("contract", CURRENT)
        return Book(trace.page_size, trace.window)

    # -- ops ------------------------------------------------------------------------------------
    @handles(Admit)
    def admit(self, op: Admit):
        if op.rid in self.seen:
            return
        self.seen.add(op.rid)
        got = yield Call(f"r{op.rid}: match_prefix(prompt of {op.prompt}, limit {op.prompt - 1})",
                         "admit_match", (op.rid, op.tokens, op.prompt, op.ns, op.priority),
                         oracle=None)
        self.count("admit with a hit" if got.actual[0] else "admit, no hit")
        self.model.requests[op.rid] = Held(tuple(op.tokens), op.prompt, op.ns, got.actual[0],
                                           got.actual[0])
        self.probed = (op.ns, self._aligned(op.tokens[:op.prompt - 1]), got.actual[0])
        yield Call(f"lock r{op.rid}'s node", "admit_lock", (op.rid,), oracle=None)

    @handles(Extend)
    def extend(self, op: Extend):
        request = self.model.requests.get(op.rid)
        plan = None if request is None or request.stale else \
            extend_plan(request, op.count, self.model.page_size)
        if plan is None:
            return
        count, decode, demand = plan
        self.count("decode" if decode else "prefill chunk")
        yield from self._make_room(demand)
        got = yield Call(f"{'alloc_decode' if decode else 'allocate'} {count} slots for "
                         f"r{op.rid} (at {request.filled})", "extend", (op.rid, count, decode),
                         oracle=None)
        if got.actual is None:
            self.count("alloc refused")
            return
        request.filled += len(got.actual)

    def _checkpoint(self, rid: int, request: Held, finishing: bool = False):
        # Before 0.5.22 a finish is `insert_req` (0.5.21) or `cache_finished_req` (0.5.20), not
        # the chunk's `cache_unfinished_req`: the driver is told, as the radix judge tells it.
        # Its cursor is never read after it (the release follows in the same op); a chunk's
        # is, under either contract (the same SWA component frees the window in both).
        self.count("checkpoint")
        legacy_finish = finishing and self.contract.legacy
        protected, cursor, filled, _, branch = self.snap["swa"]["requests"][rid]
        expected = checkpoint_cursor(filled, branch, cursor, protected, self.model.window,
                                     self.model.page_size, self.contract.lifts_swa_cursor,
                                     self.contract.swa_page_margin,
                                     self.contract.checkpoint_frees_window)
        self.cursor = (rid, cursor, expected)
        got = yield Call(f"{'finish' if legacy_finish else 'checkpoint'}(r{rid}, up_to="
                         f"{request.filled}) -> cache_protected_len", "checkpoint",
                         (rid, True) if legacy_finish else (rid,), oracle=None)
        request.protected = got.actual

    @handles(Match, Touch, Pin)
    def probe(self, op):
        name = {Match: "match", Touch: "touch", Pin: "pin"}[type(op)]
        if name != "match":
            self.count(name)
        got = yield Call(f"{name}({short(list(op.tokens), 40)})", name, (op.tokens, op.ns),
                         oracle=None)
        if isinstance(op, Match):
            self.count("match hit" if got.actual[0] else "match miss")
            self.probed = (op.ns, self._aligned(op.tokens), got.actual[0])
        elif isinstance(op, Pin):
            self.pinned = (op.ns, self._aligned(op.tokens), got.actual[2])

    @handles(Insert)
    def insert(self, op: Insert):
        key = self._aligned(op.tokens)
        self.count("insert")
        if not key:
            return
        yield from self._make_room(len(key))
        got = yield Call(f"alloc({len(key)}) for the insert", "alloc_slots", (len(key),),
                         oracle=None)
        if got.actual is None:
            self.count("insert refused")
            return
        yield Call(f"insert({short(key, 40)}, its {len(key)} slots) -> cached length", "insert",
                   (op.tokens, op.ns, op.priority, got.actual[:len(key)]), oracle=None)

    @handles(Evict)
    def evict(self, op: Evict):
        evictable = self.snap["evictable"]
        num = max(0, evictable + op.count) if op.relative else op.count
        self.count("evict")
        yield from self._evict(num, evictable, "evict")

    @handles(Reset)
    def reset(self, op: Reset):
        self.count("reset")
        yield Call("reset(); allocator.clear(); rows cleared", "reset", oracle=None)
        for request in self.model.requests.values():
            request.stale = True

    def _make_room(self, demand: int):
        """The allocator's `evict_to_free_tokens(cache, demand)`: each pool's shortfall."""
        if demand <= min(self.snap["available"], self.snap["swa"]["available"]):
            return
        self.count("evict for an allocation")
        evictable = self.snap["evictable"]
        yield Call(f"evict_for_alloc(each pool's shortfall of {demand}) -> [full, SWA "
                   f"shortfall, tokens evicted from each]", "evict_for_demand", (demand,),
                   oracle=None, compare=lambda expected, rejected, actual, raised: [] if raised
                   or actual[2] >= min(actual[0], evictable) else
                   [("eviction", f"evict_for_alloc({actual[0]} full, {actual[1]} SWA) freed "
                                 f"{actual[2]} full tokens while {evictable} were evictable: "
                                 f"short of what was asked")])

    def _evict(self, num: int, evictable: int, method: str):
        self.evicting = True  # the nodes before and after the op are set side by side
        yield Call(f"{method}({num}) -> tokens evicted", method, (num,), oracle=None,
                   compare=lambda expected, rejected, actual, raised: [] if raised or
                   actual >= min(num, evictable) else
                   [("eviction", f"{method}({num}) freed {actual} tokens while {evictable} "
                                 f"were evictable: short of what was asked")])

    def _aligned(self, tokens) -> tuple:
        ps = self.model.page_size
        return tuple(tokens[:len(tokens) // ps * ps])

    # -- after every op -------------------------------------------------------------------------
    def state(self, op) -> list[tuple[str, str]]:
        # The handlers read the last snapshot (sizes, cursors): both sides keep it, the
        # implementation's (recording) side too.
        before, self.snap = self.snap, self.read_changed("snapshot_since")
        snap = self.snap
        if recording():
            self.probed = self.cursor = self.pinned = None
            self.evicting = False
            return []
        ps = self.model.page_size
        nodes = state.views(snap, ps)
        evicted, self.evicting = self.evicting, False
        problems = radix_state.lock_problems(
            op, lambda: before and state.views(before, ps), nodes, ps, evicted)
        problems += radix_state.alias_problems(snap["aliases"], nodes) + \
            radix_state.poisoned_nodes(nodes)
        problems += [("tree", text) for text in tree_violations(nodes, ps)]
        problems += swa_problems(snap, nodes, ps, self.trace.size)
        if self.probed is not None:
            ns, key, matched = self.probed
            problems += match_problems(nodes, snap["swa"]["values"], key_namespace(ns), key,
                                       matched, self.model.window)
        if self.probed is not None and self.probed[2] < self._full_hit(nodes, *self.probed[:2]):
            self.count(WINDOW_CUT)
        locks = snap["swa"].get("locks")
        if locks is None and not self.model.requests:  # a core that hides its nodes: no lock
            locks = [0] * len(nodes)                    # held, with no request in flight
        if self.pinned is not None and locks is not None:
            ns, key, protected = self.pinned
            problems += pin_problems(nodes, snap["swa"]["values"], locks, key_namespace(ns),
                                     key, protected - snap["swa"]["protected"],
                                     self.model.window)
        self.pinned = None
        if any(value is None for value in snap["swa"]["values"]):
            self.count(TOMBSTONE)
        cursor, self.cursor, self.probed = self.cursor, None, None
        if cursor is not None and cursor[0] in snap["swa"]["requests"]:
            rid, before, expected = cursor
            actual = snap["swa"]["requests"][rid][1]
            if actual > before:
                self.count(CURSOR)
            if actual != expected:
                problems.append(("swa cursor", f"r{rid}'s SWA cursor went from {before} to "
                                               f"{actual} at its checkpoint, expected {expected}"
                                               f" (window {self.model.window})"))
        return problems + twin_problems(snap, self.twin_events)

    @staticmethod
    def _full_hit(nodes, ns: int, key) -> int:
        """How far `key` runs along the tree's nodes (full attention alone would match it)."""
        ns = key_namespace(ns)
        return max((len(n.path[1]) for n in nodes
                    if n.path[0] == ns and tuple(key[:len(n.path[1])]) == n.path[1]), default=0)
