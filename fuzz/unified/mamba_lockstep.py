"""The unified judge for a cache with the Mamba component ("full+mamba" traces, `unified-mamba/1`:
tree ops only). Like the SWA judge (`swa_lockstep.py`, whose eviction and reset handlers it
inherits) it keeps no model of the tree: which state the Mamba LRU evicts first is judged by the
Rust core against the Python core (`twin.py`, the states and the state pool included). After
every op it checks what the Mamba contract promises (`oracle.unified.mamba`): the tree's shape,
aliasing and kept tensors as for full attention; only unlocked leaves gone, and a pin's lock
counts back at their baseline (no model of the locks here: the full component's locks are
judged by these and the monotone counts alone); the full pool conserved and its sizes (on the
unified memory pool, the shared buffer's full side, and a state's eviction by the Full donor:
`donor_state.py`); the state
pool conserved (no slot in two nodes, none both cached and free, free + cached = the pool);
the Mamba sizes against the states, with their sign, and nothing protected once the op's locks
are gone; `total_size()`; a state only where an insert ended; an insert leaving a state at its
key's end and answering `mamba_exist` exactly when one was there; a match ending at the deepest
state on its full-attention hit and its `mamba_branching_seqlen`; a pin protecting one state."""

from __future__ import annotations

from kvfuzz.fuzz.engine.lockstep import Call, handles, short
from kvfuzz.fuzz.engine.transcript import recording
from kvfuzz.fuzz.radix import state as radix_state
from kvfuzz.fuzz.unified import state
from kvfuzz.fuzz.unified.donor_state import (eviction_problems, full_side_problems,
                                             refusal_problems)
from kvfuzz.fuzz.unified.lockstep import (BRANCHING, FULL_DONOR, MAMBA_CUT, MAMBA_EXIST,
                                          STATE_EVICTED)
from kvfuzz.fuzz.unified.mamba_state import (insert_problems, mamba_problems, match_problems,
                                             segments)
from kvfuzz.fuzz.unified.swa_lockstep import Book, SWALockstep
from kvfuzz.fuzz.unified.swa_state import full_pool_problems, key_namespace
from kvfuzz.fuzz.unified.twin import twin_problems
from kvfuzz.oracle.radix.invariants import tree_violations
from kvfuzz.oracle.unified.mamba import accepted_length, checkpoint_grid, grid_problems
from kvfuzz.strategies.radix.trace import Insert, Match, Pin, Reset, Touch
from kvfuzz.strategies.unified.trace import mamba_chunk


class MambaLockstep(SWALockstep):
    def build_model(self, trace):
        self.snap, self.checks, self.ends, self.evicting = None, [], set(), False
        self.donor, self.slot_taken, self.refused = self.options.get("donor", False), None, None
        self.grid = checkpoint_grid(mamba_chunk(trace.page_size), trace.page_size)
        return Book(trace.page_size, 0)

    def initial_problems(self):
        problems = super().initial_problems()
        if not problems:
            # The grid the release cuts to, read from the cache it built (0.5.11's chunk size
            # is max(64, page) whatever the server arguments ask): the judge's grid above is
            # what kvfuzz asks for, kept only where the driver cannot be asked.
            self.grid = int(self.read("mamba_grid"))
            problems = grid_problems(self.grid, self.trace.page_size)
        return problems

    # -- ops ------------------------------------------------------------------------------------
    @handles(Match, Touch, Pin)
    def probe(self, op):
        name = {Match: "match", Touch: "touch", Pin: "pin"}[type(op)]
        ns, key = key_namespace(op.ns), self._aligned(op.tokens)
        if name != "match":
            self.count(name)
        # what a pin's match locks: the deepest state on the path, read before the call
        held = accepted_length(self._segments(self.snap, ns, key)) > 0
        got = yield Call(f"{name}({short(list(op.tokens), 40)})", name, (op.tokens, op.ns),
                         oracle=None)
        if name == "match":
            self.count("match hit" if got.actual[0] else "match miss")
            self.checks.append(("match", ns, key, got.actual[0], got.actual[2]))
        elif name == "pin" and got.actual[2] != int(held):
            return [("mamba lock", f"pin({short(key, 30)}) protected {got.actual[2]} Mamba "
                                   f"states while locked, expected {int(held)}: a lock holds "
                                   f"the matched node's state alone")]

    @handles(Insert)
    def insert(self, op: Insert):
        key = self._aligned(op.tokens)
        self.count("insert")
        if not key:
            return
        ns, before = key_namespace(op.ns), self.snap
        evicted = yield from self._make_room(len(key))
        got = yield Call(f"alloc({len(key)}) for the insert", "alloc_slots", (len(key),),
                         oracle=None)
        if got.actual is None:
            self.count("insert refused")
            self.refused = len(key) if self.donor else None
            return
        self.evicting = True  # a state's eviction may take its leaf
        state_slot = yield Call("a Mamba state slot (evict_for_alloc(mamba_num=1) when none "
                                "is free) -> [slot, states evicted, tokens evicted]",
                                "mamba_slot", (), oracle=None)
        slot, states, tokens = state_slot.actual[:3]
        self.slot_taken = [state_slot.actual, None]  # judged after the op (donor_state.py)
        if states:
            self.count(STATE_EVICTED)
        buffer = state_slot.actual[3]
        if buffer is not None and buffer["ids"] and tokens:  # bytes from Full, an id free
            self.count(FULL_DONOR)
        if slot is None and self.donor:  # the shared buffer can be short: judged after the op
            yield Call(f"free the insert's {len(key)} slots (no state for it)", "free_slots",
                       (got.actual[:len(key)],), oracle=None)
            return
        if slot is None:
            return [("mamba pool", f"no Mamba state slot for the insert: the pool of "
                                   f"{before['mamba']['capacity']} had none free, and the "
                                   f"eviction freed {states} of the tree's "
                                   f"{before['mamba']['evictable']} evictable states")]
        done = yield Call(f"insert({short(key, 40)}, its {len(key)} slots, state {slot}) -> "
                          f"[cached length, mamba_exist]", "insert_mamba",
                          (op.tokens, op.ns, op.priority, got.actual[:len(key)], slot),
                          oracle=None)
        self.ends.add((ns, key))
        if self.slot_taken is not None:
            self.slot_taken[1] = ((ns, key), bool(done.actual[1]))
        if done.actual[1]:
            self.count(MAMBA_EXIST)
        # whether the tree had a state at the key's end, known when nothing was evicted since
        had = None if evicted or states or tokens else \
            any(n.path == (ns, key) and s is not None
                for n, s in zip(self._nodes(before), before["mamba"]["states"]))
        self.checks.append(("insert", ns, key, done.actual[1], had))

    def _make_room(self, demand: int):
        """`evict_for_alloc` of the full pool's shortfall; whether anything was evicted."""
        if demand <= self.snap["available"]:
            return False
        self.count("evict for an allocation")
        need, evictable = demand - self.snap["available"], self.snap["evictable"]
        if not self.donor:
            yield from self._evict(need, evictable, "evict_for_alloc")
            return True
        # On the shared buffer the shortfall is an availability target: a state freed with its
        # leaf gives the full side its bytes too, so fewer tokens may do (judged after the op:
        # the allocation refused while something was still evictable).
        self.evicting = True
        yield Call(f"evict_for_alloc({need}) -> tokens evicted", "evict_for_alloc", (need,),
                   oracle=None, compare=lambda *answers: [])
        return True

    @handles(Reset)
    def reset(self, op: Reset):
        self.ends.clear()
        yield from super().reset(op)

    # -- after every op -------------------------------------------------------------------------
    def state(self, op) -> list[tuple[str, str]]:
        before, self.snap = self.snap, self.read_changed("snapshot_since")
        snap, (checks, self.checks) = self.snap, (self.checks, [])
        if recording():
            return []
        ps, nodes = self.model.page_size, self._nodes(snap)
        problems = radix_state.alias_problems(snap["aliases"], nodes) + \
            radix_state.poisoned_nodes(nodes)
        problems += [("tree", text) for text in tree_violations(nodes, ps)]
        evicted, self.evicting = self.evicting, False
        problems += radix_state.lock_problems(
            op, lambda: before and self._nodes(before), nodes, ps, evicted)
        taken, self.slot_taken = self.slot_taken, None
        if self.donor:  # the unified memory pool: both sides of one buffer
            problems += full_side_problems(snap, nodes, ps)
            refused, self.refused = self.refused, None
            problems += refusal_problems(refused, snap)
            if taken is not None:
                contract = self.options.get("contract")  # no Full donor before 0.5.20
                problems += eviction_problems(nodes, snap, *taken, ps, full_donor=bool(
                    contract is None or contract.full_donor))
        else:
            problems += full_pool_problems(snap, nodes, set(), ps, self.trace.size)
        problems += mamba_problems(snap, nodes, self.ends)
        for check in checks:
            problems += self._after(check, snap, nodes)
        return problems + twin_problems(snap, self.twin_events)

    def _after(self, check: tuple, snap: dict, nodes) -> list[tuple[str, str]]:
        kind, ns, key, answer, extra = check
        states = snap["mamba"]["states"]
        if kind == "insert":
            return insert_problems(nodes, states, ns, key, answer, extra)
        full = sum(tokens for tokens, _ in segments(nodes, states, ns, key))
        if answer < full:
            self.count(MAMBA_CUT)
        if extra is not None:
            self.count(BRANCHING)
        contract = self.options.get("contract")  # 0.5.11's rule, read from its source
        before = bool(contract is not None and contract.branches_before_match)
        return match_problems(nodes, states, ns, key, answer, extra, self.grid, before)

    def _nodes(self, snap):
        return state.views(snap, self.model.page_size)

    def _segments(self, snap, ns, key) -> list[tuple[int, bool]]:
        return segments(self._nodes(snap), snap["mamba"]["states"], ns, key)
