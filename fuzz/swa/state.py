"""What the swa lock step checks after every op: the three available sizes, both pools' free lists
(exact order) and staged pages, the full-to-SWA mapping, the read-only API a scheduler calls
(`impl/swa/api_reads.py`), and the invariants (each pool's pages partitioned into free, staged,
pending and held; the mapping pairing exactly the in-window tokens)."""

from __future__ import annotations

from collections import Counter

from kvfuzz.fuzz.engine.lockstep import list_diff, short
from kvfuzz.fuzz.engine.transcript import recording
from kvfuzz.impl.swa.api_reads import CAPACITIES
from kvfuzz.oracle.allocator.invariants import ENGINE, state_violations
from kvfuzz.oracle.swa.invariants import (freed_peer_violations, mapping_violations,
                                         swa_holders)


class StateChecks:
    """Mixed into `SWALockstep`."""

    def state(self, op) -> list[tuple[str, str]]:
        # What an engine's op leaves half done is allowed after that op only: peers a clear
        # left unpaired (re-paired by the next call's `set_mapping`, else lost), a released
        # full slot's peer (released by the next call, else a free slot's peer).
        self.allowed = {name: slots for name, (at, slots) in
                        (("transit", self.transit), ("freed", self.freed_mapped)) if at is op}
        state = self.read_changed("state_since")  # only what changed crosses
        if recording():  # the implementation's side: the judge compares, from its replay
            return []
        return self._state(state)

    def _state(self, state: dict) -> list[tuple[str, str]]:
        model, problems = self.model, []
        expected = {"available_size": model.available_size(),
                    "full_available_size": model.full.available_size(),
                    "swa_available_size": model.swa.available_size()}
        for name, value in expected.items():
            if state[name] != value:
                problems.append((name, f"expected {value}, actual {state[name]}"))
        for pool, side in (("full", model.full), ("swa", model.swa)):
            if state[f"{pool} free"] != side.free:
                problems.append((f"{pool} free list", list_diff(side.free, state[f"{pool} free"])))
            if Counter(state[f"{pool} staged"]) != Counter(side.staged):
                problems.append((f"{pool} staged pages",
                                 f"expected {short(sorted(side.staged))}, actual "
                                 f"{short(sorted(state[f'{pool} staged']))} (as multisets)"))
        if state["mapping"] != model.mapping:
            problems.append(("mapping", _mapping_diff(model.mapping, state["mapping"])))
        problems += [("api", text) for text in self._api_problems(state)]
        return problems + [("invariant", text) for text in self._invariants(state)]

    def _api_problems(self, state: dict) -> list[str]:
        """Each read the class has against what the scheduler relies on."""
        model, reads = self.model, state.get("api", {})
        full, swa = model.full.available_size(), model.swa.available_size()
        mapping = state["mapping"]
        expected = {
            "need_sort": self.trace.need_sort,
            "size": min(model.size_full, model.size_swa), "size_full": model.size_full,
            "size_swa": model.size_swa, "swa_req_ring": False, "swa_ring_cost_tokens": 0,
            # through the KV pool, as a transfer translates: the mapping's own pairs, and the
            # "no prefix" -1 as -1
            "translated": [mapping[slot] for slot in mapping] + [-1],
            "capacity": [[CAPACITIES[0], full], [CAPACITIES[1], swa]],
            "conserve": [full, swa], "kvcache": True, "free pages": None, "budget": True}
        found = [f"{name}: expected {short(want)}, actual {short(reads[name])}"
                 for name, want in expected.items() if name in reads and reads[name] != want]
        text = reads.get("debug_print", "")
        named = (f"#swa-available-size: {swa}", f"#full-attn-available-size: {full}")
        if not isinstance(text, str) or (text and not all(part in text for part in named)):
            found.append(f"debug_print: expected a line naming {' and '.join(named)}, actual "
                         f"{short(text)}")
        return found

    def _invariants(self, state: dict) -> list[str]:
        model, P = self.model, self.P
        found = []
        for pool, side in (("full", model.full), ("swa", model.swa)):
            capacity = side.num_pages * P
            if state[f"{pool}_available_size"] > capacity:
                found.append(f"{pool} available size {state[f'{pool}_available_size']} exceeds "
                             f"the capacity {capacity}")
        rows, evicted = self.rows, self.evicted
        if self.engine_window:  # the engine's slots with a peer: its window, from position 0
            rows = {**rows, ENGINE: sorted(self.engine_window)}
            evicted = {**evicted, ENGINE: 0}
        full_holders: dict[int, set[int]] = {page: {ENGINE} for page in self.engine_pages}
        for rid, row in self.rows.items():
            for slot in row:
                full_holders.setdefault(slot // P, set()).add(rid)
        swa_pending = model.swa_page_ids_group + sorted({s // P for s in model.swa_free_group
                                                         if s > 0})
        found += [f"full pool: {text}" for text in state_violations(
            model.full.num_pages, state["full free"], state["full staged"],
            model.full.pending_pages(), full_holders)]
        swa_held = swa_holders(state["mapping"], rows, evicted, P)
        for slot in self.allowed.get("transit", ()):
            swa_held.setdefault(slot // P, set()).add(ENGINE)
        found += [f"SWA pool: {text}" for text in state_violations(
            model.swa.num_pages, state["swa free"], state["swa staged"], swa_pending, swa_held)]
        mapping = {slot: peer for slot, peer in state["mapping"].items()
                   if slot not in self.allowed.get("freed", ())}
        return found + mapping_violations(state["mapping"], rows, evicted, P) + \
            freed_peer_violations(mapping, state["full free"], state["full staged"], P)


def _mapping_diff(expected: dict, actual: dict) -> str:
    keys = sorted(set(expected) | set(actual))
    wrong = [k for k in keys if expected.get(k, 0) != actual.get(k, 0)]
    shown = ", ".join(f"{k}: {expected.get(k, 0)} vs {actual.get(k, 0)}" for k in wrong[:5])
    return f"{len(wrong)} full slots map differently (full slot: expected vs actual SWA slot, " \
           f"0 = none): {shown}"
