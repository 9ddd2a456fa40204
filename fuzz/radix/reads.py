"""The radix judge's reads of the implementation's state (mixed into `RadixLockstep`, whose
`build_model` sets the model, page names, event ledger and events switch they use). After every
op a light read (sizes, rows, events and a digest of every node) is set against the model; the
state is read whole every `FULL_EVERY` reads, after the last op and where the light read differs,
and set against the invariants (a locked page never evicted, no tree value sharing memory with
another node, a row or the caller's tensor, edges keyed by their child's first page, lock counts
monotone, from the nodes before and after the op only unlocked leaves gone and a pin's lock
counts back at their baseline (what a judge without the model still sees), whole pages, no slot
twice, none both cached and free, the sizes against their nodes with the sign, available +
evictable + protected + held = capacity), then the model's exact state (pages evicted in policy
order, every node, free pages, rows) and, with events on, that the events' stored minus removed
pages are the cached ones (`state.py`). Apart from the op handlers (`lockstep.py`) because the
reads are one concept the window and unified judges override piece by piece (`light_problems`,
`as_read`, `whole_args`, `views`, `more_problems`)."""

from __future__ import annotations

from kvfuzz.fuzz.engine.transcript import recording
from kvfuzz.fuzz.radix import state
from kvfuzz.oracle.radix.invariants import tree_violations


class TreeReads:
    """The reads after every op: light ones between whole ones; `step` adds to a whole read's
    find the ops it may come from."""

    # The whole state is read every FULL_EVERY reads, after the last op and where the light
    # read (sizes, rows, every node's digest: `impl/radix/digest.py`) differs from the model;
    # between them only the light read crosses. Both sides check the light read, so that both
    # ask for the same whole reads (the judge's replay follows the recorded requests).
    FULL_EVERY = 8
    LIGHT = True  # whether the driver has the light read (`light_since`)
    # Where the reads stand (class defaults: the SWA and Mamba lock steps build their own
    # models, not this one's, and read whole every op): the op's index in the trace, reads
    # made, the op and the read of the last whole one, the note a whole read's find carries.
    at, reads, full_at, last_full, note = -1, 0, -1, None, None

    def step(self, op):
        self.at += 1
        self.note = None
        line, problems = super().step(op)
        if problems and self.note and problems[0] is self.note[0]:  # the whole read's find
            problems.append(self.note[1])
        return line, problems

    def state(self, op) -> list[tuple[str, str]]:
        reads = self.reads
        self.reads = reads + 1
        light = []
        if self.LIGHT and op is not None and reads % self.FULL_EVERY and \
                self.at < len(self.trace.ops) - 1:
            expected = self.model.views()
            read = self.read_changed("light_since")
            light = self.light_problems(read, expected)
            if not light and (self.events_on or read["events"]):  # against the model's
                light = self._event_problems(read["events"], self.as_read(expected))  # pages
            if not light:  # the tree is the model's: its nodes stand for the implementation's
                # (on the implementation's side nothing reads them: `whole_state`)
                before = None if recording() else self.as_read(expected)
                self.nodes_before = self.before_views = before
                self.pages_before = self.expected_before = None
                self.evicting = False
                return []
        return self._whole(op, located=bool(light)) or light

    def light_problems(self, light: dict, expected: list) -> list[tuple[str, str]]:
        return state.light_problems(self.model, light, expected)

    def whole_args(self) -> tuple:
        """More arguments of the whole read (`snapshot_since`)."""
        return ()

    def as_read(self, expected: list) -> list:
        """The model's nodes as the implementation's whole read shows them."""
        return expected

    def _whole(self, op, located: bool = False) -> list[tuple[str, str]]:
        """The whole read's problems, saying which ops they may come from where the read before
        it was not after the op before (`located`: this op's light read saw them: this op)."""
        at, since = self.at, self.full_at
        self.last_full, self.full_at = self.reads, at
        problems = self.whole_state(op)
        self.note = None
        if problems and self.LIGHT and not located and since < at - 1:
            self.note = (problems[0], ("whole read", f"read whole every {self.FULL_EVERY} reads "
                                                     f"(between: sizes, rows, digests, events); "
                                                     f"this may have changed in any op from "
                                                     f"{since + 1} to {at}"))
        return problems

    def whole_state(self, op) -> list[tuple[str, str]]:
        # only changes cross
        model, snap = self.model, self.read_changed("snapshot_since", *self.whole_args())
        if recording():  # the implementation's side: the judge compares, from its replay
            self.evicting = False
            # (the ledger as the judge's, which the light reads' checks read on both sides)
            self.ledger.fold(snap["events"]) if self.events_on else None
            return []
        ps = model.page_size
        nodes, expected = self.views(snap)
        pages, expected_pages = self.names.count(nodes, ps), self.names.count(expected, ps)
        problems = state.locked_problems(model, self.names, pages)
        problems += state.alias_problems(snap["aliases"], nodes) + state.poisoned_nodes(nodes)
        problems += [("tree", text) for text in tree_violations(nodes, ps)]
        problems += state.lock_problems(op, lambda: self.nodes_before, nodes, ps, self.evicting)
        problems += state.pool_problems(model, snap, nodes)
        if self.evicting and self.expected_before is None and self.nodes_before is not None:
            # the op before was a light one: the model's nodes then were the implementation's
            self.pages_before = self.expected_before = self.names.count(self.before_views, ps)
        if self.evicting and self.pages_before is not None:
            problems += state.eviction_problems(
                self.names, self.expected_before - expected_pages, self.pages_before - pages,
                self.trace.policy)
        problems += state.node_problems(expected, nodes)
        problems += self._event_problems(snap["events"], nodes)
        problems += self.more_problems(snap, nodes)
        self.pages_before, self.expected_before, self.evicting = pages, expected_pages, False
        self.nodes_before = nodes
        return problems

    def finish(self) -> list[tuple[str, str]]:
        """The whole state after the last op, where the last op called nothing and the read
        before was a light one."""
        if self.LIGHT and self.last_full != self.reads:
            problems = self._whole(None)
            return problems + [self.note[1]] if self.note else problems
        return []

    def views(self, snap) -> tuple[list, list]:
        """(the implementation's nodes, the model's), as `NodeView`s to set side by side."""
        return state.views(snap["nodes"], self.model.page_size), self.model.views()

    def more_problems(self, snap, nodes) -> list[tuple[str, str]]:
        """What a cache of another shape checks besides (the unified cache's walk and cores)."""
        return []

    def _event_problems(self, events, nodes) -> list[tuple[str, str]]:
        if not self.events_on:
            return [("events", f"{len(events)} KV events published with events off")] \
                if events else []
        cached = self.names.count(nodes, self.model.page_size, namespaces=False)
        found = self.ledger.fold(events) + self.ledger.compare(cached)
        return [("events", text) for text in found]
